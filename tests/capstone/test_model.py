"""The transformer's backward is its forward's gradient (central differences), and the course's operators are
the ones lesson 06's exercises ask for."""

import numpy as np
import pytest

from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    count_params,
    course_ops,
    flatten,
    gpt_forward,
    init_theta,
    loss_and_grad,
    param_layout,
    views,
)
from mlsys_lab.capstone.operators import cross_entropy_with_grad, layer_norm_grad
from mlsys_lab.exercises.training_memory import reference_layer_norm_backward
from mlsys_lab.nn import cross_entropy

TINY = GPTConfig(vocab_size=7, context=5, d_model=8, n_heads=2, n_layers=2, dtype="float64")


def _problem(seed=0):
    g = np.random.default_rng(seed)
    theta = init_theta(TINY, seed) + g.normal(0, 0.05, count_params(TINY))  # gains and biases away from 1 and 0
    return theta, g.integers(0, 7, (3, 5)), g.integers(0, 7, (3, 5))


def test_gradient_matches_central_differences_on_every_parameter():
    theta, idx, targets = _problem()
    loss, grad = loss_and_grad(theta, idx, targets, TINY)
    numeric = np.empty_like(theta)
    for i in range(theta.size):
        step = np.zeros_like(theta)
        step[i] = 1e-6
        numeric[i] = (loss_and_grad(theta + step, idx, targets, TINY)[0]
                      - loss_and_grad(theta - step, idx, targets, TINY)[0]) / 2e-6
    assert np.abs(numeric - grad).max() < 1e-8 * max(1.0, np.abs(grad).max()), \
        {name: float(v.max()) for name, v in views(np.abs(numeric - grad), TINY).items() if v.max() > 1e-8}
    assert all(np.abs(v).max() > 0 for v in views(grad, TINY).values())  # every parameter gets a gradient


def test_attention_is_causal():
    theta, idx, _ = _problem(1)
    logits, _ = gpt_forward(theta, idx, TINY)
    changed = idx.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % 7
    logits2, _ = gpt_forward(theta, changed, TINY)
    assert np.allclose(logits[:, :3], logits2[:, :3]) and not np.allclose(logits[:, 3:], logits2[:, 3:])


def test_the_operators_are_lesson_06s():
    g = np.random.default_rng(3)
    logits, labels = g.normal(size=(6, 5)), g.integers(0, 5, 6)
    losses, grad = cross_entropy_with_grad(logits, labels, 0.0, np.full(6, 1 / 6))
    loss, want = cross_entropy(logits, labels)
    assert np.isclose(losses.mean(), loss) and np.allclose(grad, want)
    x, dy = g.normal(size=(4, 9)) + 100.0, g.normal(size=(4, 9))
    assert np.allclose(layer_norm_grad(x, dy), reference_layer_norm_backward(x, dy), atol=1e-12)


def test_the_ops_passed_in_are_the_ones_used():
    calls = []

    def counting(name, fn):
        return lambda *args: calls.append(name) or fn(*args)

    ops = course_ops()
    theta, idx, targets = _problem()
    loss_and_grad(theta, idx, targets, TINY, ModelOps(counting("ce", ops.cross_entropy),
                                                      counting("ln", ops.layer_norm_backward),
                                                      counting("att", ops.attention_backward)))
    assert calls.count("ce") == 1 and calls.count("ln") == 2 * TINY.n_layers + 1
    assert calls.count("att") == TINY.n_layers


def test_flat_parameters_round_trip_and_configs_are_checked():
    theta = init_theta(GPTConfig(), 0)
    assert theta.dtype == np.float32 and theta.size == count_params(GPTConfig()) == 112_128
    named = views(theta, GPTConfig())
    assert [name for name, _ in param_layout(GPTConfig())] == list(named)
    assert np.array_equal(flatten(named, GPTConfig()), theta)
    with pytest.raises(ValueError, match="n_heads"):
        GPTConfig(d_model=64, n_heads=5)
    with pytest.raises(ValueError, match="theta"):
        views(theta[:-1], GPTConfig())
