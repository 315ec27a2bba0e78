"""The fused gate equals the unfused chain, and the byte counts follow the passes."""

import numpy as np
import pytest

from mlsys_lab.moe.fused_gate import gate_bytes, gate_fused, gate_unfused


@pytest.mark.parametrize(("n_tokens", "n_experts", "k"), [(1000, 64, 6), (37, 8, 2), (5, 256, 8), (3, 4, 4)])
def test_fused_gate_equals_the_array_chain(n_tokens, n_experts, k):
    rng = np.random.default_rng()
    # distinct values in every row (a tie at the k-th place could be broken either way by the two versions)
    ranks = rng.permuted(np.tile(np.arange(n_experts), (n_tokens, 1)), axis=1)
    logits = (ranks + rng.uniform(0, 0.5, (n_tokens, n_experts))).astype(np.float32) * 0.1
    idx_f, w_f = gate_fused(logits, k)
    idx_u, w_u = gate_unfused(logits, k)
    np.testing.assert_array_equal(idx_f, idx_u)
    np.testing.assert_allclose(w_f, w_u, rtol=1e-5)
    np.testing.assert_allclose(w_f.sum(axis=1), 1, rtol=1e-5)
    # best first, and they really are the k largest
    assert (np.diff(np.take_along_axis(logits, idx_f, axis=1), axis=1) <= 0).all()
    kth = np.sort(logits, axis=1)[:, -k]
    assert (np.take_along_axis(logits, idx_f, axis=1).min(axis=1) >= kth).all()


def test_gate_bytes_and_bad_input():
    # T = 1000, n = 64, k = 2, fp32: fused reads 256,000 B and writes 1000 x 2 x 12
    assert gate_bytes(1000, 64, 2) == 256_000 + 24_000
    assert gate_bytes(1000, 64, 2, fused=False) == 8 * 256_000 + 256_000 + 512_000 + 4 * 24_000
    with pytest.raises(ValueError, match="k must be an integer between 1 and 8"):
        gate_fused(np.zeros((4, 8), np.float32), 9)
    with pytest.raises(ValueError, match="logits must be a 2-D"):
        gate_unfused(np.zeros(8), 1)
