"""The graph passes: every pass computes what eager execution computes, on fresh random inputs."""

import pytest
from operators.programs import assert_close, branches, chain, mlp_block, randn

from mlsys_lab.operators import (
    causal_mask,
    eliminate_dead_code,
    exp,
    fuse_elementwise,
    fusion_groups,
    matmul,
    peak_live_bytes,
    relu,
    reorder_for_memory,
    replace_attention,
    run_eager,
    sigmoid,
    softmax,
    trace,
    transpose,
)


def test_fusion_makes_one_kernel_equal_to_eager_and_moves_fewer_bytes():
    graph = trace(chain, (16, 32), (16, 32), (32,))
    fused = fuse_elementwise(graph)
    assert fused.n_kernels == 1 and fused.nodes[-1].attrs["ops"] == "mul→add→tanh→mul→add"
    a, b, c = randn(16, 32), randn(16, 32), randn(32)
    assert_close(run_eager(fused, a, b, c), run_eager(graph, a, b, c), rtol=1e-5, atol=1e-6)
    n = 16 * 32 * 4
    assert graph.bytes_moved() == 3 * n + (2 * n + 32 * 4) + 3 * 2 * n  # mul, add (+ bias), tanh, mul, add
    assert fused.bytes_moved() == 3 * n + 32 * 4


def test_a_value_read_twice_is_not_fused_into_one_reader():
    def swish_of_sum(a, b):
        s = a + b
        return s * sigmoid(s)

    graph = trace(swish_of_sum, (8, 8), (8, 8))
    groups = fusion_groups(graph)
    assert [[n.op for n in g] for g in groups] == [["sigmoid", "mul"]]
    a, b = randn(8, 8), randn(8, 8)
    assert_close(run_eager(fuse_elementwise(graph), a, b), run_eager(graph, a, b), rtol=1e-5)


def test_fusion_stops_at_a_matmul_and_fuses_the_epilogue():
    graph = trace(mlp_block, (8, 16), (16, 32), (32,), (32, 16), (16,), (16,))
    fused = fuse_elementwise(graph)
    assert [n.attrs["ops"] for n in fused.nodes if n.op == "fused"] == ["add→gelu"]
    args = (randn(8, 16), randn(16, 32), randn(32), randn(32, 16), randn(16), randn(16))
    assert_close(run_eager(fused, *args), run_eager(graph, *args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_pattern_is_replaced_by_one_kernel_with_equal_results(causal):
    def attn(q, k, v):
        scores = matmul(q, transpose(k)) * 0.125
        return softmax(causal_mask(scores) if causal else scores) @ v

    shape = (3, 40, 16)
    graph = trace(attn, shape, shape, shape)
    replaced = replace_attention(graph)
    assert graph.n_kernels == 6 - (not causal) and replaced.n_kernels == 1
    assert replaced.nodes[-1].attrs["causal"] == causal
    args = (randn(*shape), randn(*shape), randn(*shape))
    assert_close(run_eager(replaced, *args), run_eager(graph, *args), rtol=1e-4, atol=1e-5)


def test_attention_is_not_replaced_when_the_probabilities_are_needed_elsewhere():
    def attn_and_probs(q, k, v):
        probs = softmax(matmul(q, transpose(k)) * 0.125)
        return probs @ v, probs

    graph = trace(attn_and_probs, (8, 4), (8, 4), (8, 4))
    assert replace_attention(graph).op_counts().get("attention", 0) == 0


def test_dead_code_elimination_removes_unused_nodes_only():
    def with_dead(x):
        _unused = exp(x) * 3.0
        return relu(x)

    graph = trace(with_dead, (4,))
    clean = eliminate_dead_code(graph)
    assert [n.op for n in clean.nodes] == ["input", "relu"]
    x = randn(4)
    assert_close(run_eager(clean, x), run_eager(graph, x))


def test_reorder_lowers_peak_memory_and_keeps_results():
    graph = trace(branches, (64, 256))
    reordered = reorder_for_memory(graph)
    tensor = 64 * 256 * 4
    assert peak_live_bytes(graph) >= 4 * tensor
    assert peak_live_bytes(reordered) <= tensor + 3 * 64 * 4
    x = randn(64, 256)
    assert_close(run_eager(reordered, x), run_eager(graph, x), rtol=1e-5)
    position = {n.name: i for i, n in enumerate(reordered.nodes)}
    assert all(position[i] < position[n.name] for n in reordered.nodes for i in n.inputs)
