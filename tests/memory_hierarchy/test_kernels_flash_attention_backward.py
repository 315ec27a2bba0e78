"""Does the tiled FlashAttention-2 backward (Algorithm 2) give the dense backward's gradients, the forward's central
differences and the causal mask's zeros, without ever holding an S × S matrix; and are its FLOP and byte counts
the papers'?"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from mlsys_lab.capstone.operators import attention_vjp
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import from_bf16_bits, to_bf16_bits
from mlsys_lab.kernels.memory_hierarchy.flash_attention import attention_reference
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import (
    attention_backward_bytes,
    attention_backward_dense,
    attention_backward_flop,
    attention_backward_tiled,
    attention_forward_lse,
)


def _case(seed, shape, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(4))  # q, k, v, dO


def _relative(got, expected):
    """Largest error over the largest entry (or 1: at S = 1, dQ and dK are zero)."""
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1.0))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq, br, bc", [(64, 16, 8), (64, 128, 64), (37, 16, 8), (50, 7, 13), (1, 4, 4), (9, 1, 1)])
def test_tiled_equals_the_dense_backward_to_round_off(causal, seq, br, bc):
    """float64, blocks that divide S and blocks that do not, Br ≠ Bc: agreement to a few units of 2⁻⁵³."""
    q, k, v, do = _case(seq, (2, 3, seq, 16))
    o, lse = attention_forward_lse(q, k, v, causal)
    for got, expected in zip(attention_backward_tiled(q, k, v, o, do, lse, causal, br, bc),
                             attention_backward_dense(q, k, v, do, causal), strict=True):
        assert _relative(got, expected) < 1e-13


def test_the_dense_backward_is_the_capstones():
    """A second, separately written dense backward (lesson 12's) agrees, given P."""
    q, k, v, do = _case(1, (1, 2, 12, 8))
    scale = 1 / math.sqrt(8)
    s = np.where(np.tril(np.ones((12, 12), dtype=bool)), q @ k.swapaxes(-1, -2) * scale, -np.inf)
    probs = np.exp(s - s.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    for got, expected in zip(attention_backward_dense(q, k, v, do, True), attention_vjp(q, k, v, probs, do, scale),
                             strict=True):
        assert _relative(got, expected) < 1e-13


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_gradients_are_central_differences_of_the_forward(causal):
    """d/dθ of sum(O ∘ dO) by central differences (h = 10⁻⁶, float64) for every entry of Q, K and V."""
    q, k, v, do = _case(7, (1, 2, 7, 3))
    o, lse = attention_forward_lse(q, k, v, causal)
    grads = attention_backward_tiled(q, k, v, o, do, lse, causal, block_rows=3, block_cols=2)
    h = 1e-6
    for index, (x, grad) in enumerate(zip((q, k, v), grads, strict=True)):
        numeric = np.zeros_like(x)
        for position in np.ndindex(x.shape):
            values = []
            for step in (h, -h):
                args = [q.copy(), k.copy(), v.copy()]
                args[index][position] += step
                values.append(float((attention_forward_lse(*args, causal)[0] * do).sum()))
            numeric[position] = (values[0] - values[1]) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_causal_mask_in_the_gradients():
    """Query r sees keys c ≤ r only: the last key's dV is P[S−1, S−1]·dO[S−1], its dK comes from the last query
    alone, and the first query's dQ is zero (it sees one key: softmax of one score has no slope). S = 37 with 16 × 8
    blocks: the last tiles are short."""
    seq = 37
    q, k, v, do = _case(3, (1, 1, seq, 4))
    o, lse = attention_forward_lse(q, k, v, True)
    dq, dk, dv = attention_backward_tiled(q, k, v, o, do, lse, True, 16, 8)
    p_last = math.exp(float(q[0, 0, -1] @ k[0, 0, -1]) / 2 - lse[0, 0, -1])  # scale 1/sqrt(4)
    np.testing.assert_allclose(dv[0, 0, -1], p_last * do[0, 0, -1], rtol=1e-12)
    ds_last = p_last * (float(do[0, 0, -1] @ v[0, 0, -1]) - float(do[0, 0, -1] @ o[0, 0, -1]))
    np.testing.assert_allclose(dk[0, 0, -1], ds_last * q[0, 0, -1] / 2, rtol=1e-10)
    assert np.abs(dq[0, 0, 0]).max() < 1e-15
    # a future key changes nothing: moving every key and value after position 20 leaves dQ of rows ≤ 20 unchanged
    k2, v2 = k.copy(), v.copy()
    k2[..., 21:, :] += 5.0
    v2[..., 21:, :] -= 3.0
    o2, lse2 = attention_forward_lse(q, k2, v2, True)
    dq2 = attention_backward_tiled(q, k2, v2, o2, do, lse2, True, 16, 8)[0]
    np.testing.assert_array_equal(dq2[..., :21, :], dq[..., :21, :])


def test_the_forward_saves_the_log_sum_exp_and_matches_the_course_reference():
    """L = log Σ exp(s) per row (summed directly, no max), and O is the forward kernel's float32 reference."""
    rng = np.random.default_rng(5)
    bits = [to_bf16_bits(rng.standard_normal((1, 2, 16, 64)).astype(np.float32)) for _ in range(3)]
    q, k, v = (from_bf16_bits(b) for b in bits)
    for causal in (False, True):
        o, lse = attention_forward_lse(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal)
        np.testing.assert_allclose(o, attention_reference(*bits, causal=causal), rtol=1e-4, atol=1e-5)
        s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / 8
        exps = np.exp(s) * (np.tril(np.ones((16, 16))) if causal else 1)
        np.testing.assert_allclose(lse, np.log(exps.sum(axis=-1)), rtol=1e-13)


def test_float32_inputs_stay_float32_and_close_to_float64():
    q, k, v, do = _case(11, (2, 2, 100, 32), np.float32)
    o, lse = attention_forward_lse(q, k, v, True)
    grads = attention_backward_tiled(q, k, v, o, do, lse, True)
    assert all(g.dtype == np.float32 for g in (o, lse, *grads))
    exact = attention_backward_dense(*(x.astype(np.float64) for x in (q, k, v, do)), True)
    assert max(_relative(g, e) for g, e in zip(grads, exact, strict=True)) < 1e-5


def test_no_seq_by_seq_matrix_is_ever_held():
    """S = 1024, one head: the dense backward holds several 8 MiB (S × S) float64 arrays; the tiled one's peak stays
    below one of them (its tiles are 128 × 64)."""
    seq = 1024
    q, k, v, do = _case(2, (1, 1, seq, 16))
    o, lse = attention_forward_lse(q, k, v, True)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        attention_backward_tiled(q, k, v, o, do, lse, True)
        peak_tiled = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        attention_backward_dense(q, k, v, do, True)
        peak_dense = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_tiled < seq * seq * 8 / 4 < 2 * seq * seq * 8 < peak_dense


def test_flop_counts_are_the_papers():
    """B 4, H 16, S 4096, D 128: forward 4·4·16·4096²·128 = 2³⁹; backward 2.5× that; causal halves both."""
    assert attention_backward_flop(4, 16, 4096, 128, False) == 2.5 * 2 ** 39 == 1_374_389_534_720
    assert attention_backward_flop(4, 16, 4096, 128, True) == 1.25 * 2 ** 39
    # five (S × S × D) products of 2·S²·D each, per head: S, dV, dP, dQ, dK
    assert attention_backward_flop(1, 1, 3, 2, False) == 5 * 2 * 3 * 3 * 2


def test_byte_counts_by_hand():
    """Llama-2 7B's attention (32 heads of 128) at S = 4096, batch 1, bf16: P is 32·4096²·2 = 1 GiB; O and L are
    32·4096·(128·2 + 4) = 34,078,720 bytes; Q, K, V 3·32·4096·128·2."""
    counts = attention_backward_bytes(1, 32, 4096, 128)
    assert counts.stored_p == 2 ** 30 and counts.fused == 34_078_720 and counts.qkv == 3 * 2 ** 25
    assert counts.saved == 2 ** 30 - 34_078_720 and counts.ratio == pytest.approx(4096 * 2 / 260)
    fp32 = attention_backward_bytes(2, 1, 10, 4, value_bytes=4)
    assert (fp32.stored_p, fp32.fused, fp32.qkv) == (2 * 10 * 10 * 4, 2 * 10 * (4 * 4 + 4), 3 * 2 * 10 * 4 * 4)


@pytest.mark.parametrize("call, name", [
    (lambda q: attention_backward_tiled(q, q, q, q, q, np.zeros((1, 1, 4)), block_rows=0), "block_rows"),
    (lambda q: attention_backward_tiled(q, q, q, q, q, np.zeros((1, 1, 5))), "lse"),
    (lambda q: attention_backward_tiled(q, q, q[..., :1], q, q, np.zeros((1, 1, 4))), "v"),
    (lambda q: attention_backward_dense(q, q, q, q, causal=1), "causal"),
    (lambda q: attention_forward_lse(q, q, q, scale=-1.0), "scale"),
    (lambda q: attention_backward_bytes(1, 1, 4, 2, value_bytes=3), "value_bytes"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises((ValueError, TypeError), match=name):
        call(np.ones((1, 1, 4, 2)))
