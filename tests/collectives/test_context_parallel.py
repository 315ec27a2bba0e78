"""Does ring attention give full attention's numbers, send what a ring sends, and hide its transfers where
the α-β model says?"""

import math

import numpy as np
import pytest

from mlsys_lab.collectives import context_parallel as cp
from mlsys_lab.collectives.network import Network


def _qkv(seq, d, seed=0):
    g = np.random.default_rng(seed)
    return tuple(g.standard_normal((seq, d)) for _ in range(3))


def _softmax_attention_by_loops(q, k, v, causal):
    """An independent reference: one query row at a time, in plain float64."""
    out = np.zeros_like(q)
    for i in range(len(q)):
        keys = range(i + 1) if causal else range(len(k))
        scores = np.array([q[i] @ k[j] / math.sqrt(q.shape[1]) for j in keys])
        weights = np.exp(scores - scores.max())
        out[i] = weights @ v[list(keys)] / weights.sum()
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_full_attention_matches_row_by_row_softmax(causal):
    q, k, v = _qkv(11, 4)
    np.testing.assert_allclose(cp.full_attention(q, k, v, causal), _softmax_attention_by_loops(q, k, v, causal),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("seq", "d", "p"), [(64, 16, 4), (37, 8, 5), (8, 3, 8), (3, 2, 5), (20, 4, 1)])
def test_ring_attention_equals_full_attention(seq, d, p, causal):
    """Uneven blocks, more ranks than tokens (empty blocks) and one rank included."""
    q, k, v = _qkv(seq, d, seed=seq + p)
    result = cp.ring_attention(q, k, v, p, causal=causal)
    assert np.max(np.abs(result.output - cp.full_attention(q, k, v, causal))) < 1e-12
    assert result.steps == p - 1


def test_every_rank_forwards_all_blocks_but_its_last():
    """p = 4, s = 64, d = 16: each rank forwards p − 1 blocks of K and V, 16 × 16 float64 each: 3·2·16·16·8 bytes."""
    q, k, v = _qkv(64, 16)
    net = Network(4)
    result = cp.ring_attention(q, k, v, 4, net=net)
    assert result.bytes_sent.tolist() == [3 * 2 * 16 * 16 * 8] * 4 and net.steps == 3
    assert result.blocks_computed.tolist() == [4] * 4


def test_causal_rank_skips_the_future_blocks():
    q, k, v = _qkv(40, 4)
    assert cp.ring_attention(q, k, v, 5, causal=True).blocks_computed.tolist() == [1, 2, 3, 4, 5]


def test_large_scores_do_not_overflow():
    """Scores of order 1e3 overflow exp() without the running maximum."""
    q, k, v = _qkv(24, 4)
    q *= 300.0
    np.testing.assert_allclose(cp.ring_attention(q, k, v, 3).output, cp.full_attention(q, k, v), rtol=0, atol=1e-10)


def test_overlap_threshold_is_the_crossing_of_compute_and_transfer():
    """At α = 0 the threshold is e·F/(2B) (F/B for bf16, Ring Attention §3); with α it still balances the step."""
    flops, bandwidth = 989.5e12, 450e9
    assert cp.overlap_block_tokens(flops, bandwidth) == pytest.approx(flops / bandwidth)
    assert cp.overlap_block_tokens(flops, bandwidth, bytes_per_element=4) == pytest.approx(2 * flops / bandwidth)
    b = cp.overlap_block_tokens(flops, bandwidth, alpha=10e-6, head_dim=128, n_heads=8)
    compute, transfer = cp.ring_step_seconds(b, 128, 8, flops, bandwidth, alpha=10e-6)
    assert compute == pytest.approx(transfer, rel=1e-9)
    compute, transfer = cp.ring_step_seconds(np.array([b / 2, 2 * b]), 128, 8, flops, bandwidth, alpha=10e-6)
    assert compute[0] < transfer[0] and compute[1] > transfer[1]
    assert b > flops / bandwidth  # the start-up latency needs longer blocks to hide


@pytest.mark.parametrize(("call", "text"), [
    (lambda: cp.ring_attention(np.ones((4, 2)), np.ones((4, 3)), np.ones((4, 2)), 2), "one \\(seq, d\\) shape"),
    (lambda: cp.ring_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), 0), "n_ranks"),
    (lambda: cp.ring_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), 2, net=Network(3)), "net must"),
    (lambda: cp.ring_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), 2, causal=1), "causal"),
    (lambda: cp.full_attention(np.ones(4), np.ones(4), np.ones(4)), "q must have 2 dimensions"),
    (lambda: cp.ring_step_seconds(-1.0, 64, 1, 1e12, 1e9), "block_tokens"),
    (lambda: cp.overlap_block_tokens(0.0, 1e9), "flop_per_s"),
    (lambda: cp.overlap_block_tokens(1e12, 1e9, alpha=-1.0), "alpha"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()
