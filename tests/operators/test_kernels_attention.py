"""Does the fused attention kernel compute softmax(q·kᵀ·scale [+ causal mask])·v, as the unfused formula does?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.kernels.operators.attention import fused_attention


def reference(q, k, v, scale, causal):
    scores = np.einsum("...qd,...kd->...qk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        s_q, s_k = scores.shape[-2:]
        scores = np.where(np.triu(np.ones((s_q, s_k), dtype=bool), k=1 + s_k - s_q), -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_matches_the_formula(causal):
    g = np.random.default_rng()
    q, k, v = (g.standard_normal((2, 3, 17, 8), dtype=np.float32) for _ in range(3))
    got = fused_attention(xp.asarray(q), xp.asarray(k), xp.asarray(v), 0.35, causal)
    assert got.shape == (2, 3, 17, 8)
    np.testing.assert_allclose(asnumpy(got), reference(q, k, v, 0.35, causal), rtol=1e-4, atol=1e-5)


def test_first_causal_row_sees_only_the_first_key():
    """Row 0 of a causal square attention attends to key 0 alone: its output is v[0]."""
    g = np.random.default_rng()
    q, k, v = (g.standard_normal((5, 4), dtype=np.float32) for _ in range(3))
    got = asnumpy(fused_attention(xp.asarray(q), xp.asarray(k), xp.asarray(v), 0.5, causal=True))
    np.testing.assert_allclose(got[0], v[0], rtol=1e-6)
