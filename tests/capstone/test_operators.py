"""The course's operators of the capstone's model: the prompt's worked example of causal_probs, and attention_vjp
against central differences of y = P·v through the mask."""

import numpy as np
import pytest

from mlsys_lab.capstone.operators import attention_vjp, causal_probs


def test_causal_probs_of_the_prompts_example():
    q, k = np.array([1.0, 2.0]).reshape(1, 1, 2, 1), np.array([1.0, 0.0]).reshape(1, 1, 2, 1)
    probs = causal_probs(q, k, 1.0)[0, 0]
    e2 = np.exp(2.0)
    assert np.allclose(probs, [[1.0, 0.0], [e2 / (e2 + 1), 1 / (e2 + 1)]])  # position 1 sees scores [2, 0]


def test_attention_vjp_matches_central_differences():
    g = np.random.default_rng(3)
    q, k, v, dy = (g.normal(size=(1, 2, 4, 3)) for _ in range(4))
    scale = 0.7

    def loss(q, k, v):
        return float((causal_probs(q, k, scale) @ v * dy).sum())

    grads = attention_vjp(q, k, v, causal_probs(q, k, scale), dy, scale)
    for which, grad in enumerate(grads):
        args = [q, k, v]
        numeric = np.zeros_like(grad)
        for i in np.ndindex(grad.shape):
            up, down = [a.copy() for a in args], [a.copy() for a in args]
            up[which][i] += 1e-6
            down[which][i] -= 1e-6
            numeric[i] = (loss(*up) - loss(*down)) / 2e-6
        assert np.abs(numeric - grad).max() < 1e-7


def test_causal_probs_names_a_bad_argument():
    with pytest.raises(ValueError, match="scale"):
        causal_probs(np.ones((1, 1, 2, 1)), np.ones((1, 1, 2, 1)), 0.0)
