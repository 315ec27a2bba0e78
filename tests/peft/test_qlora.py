"""Does the QLoRA classifier train only its adapters, with gradients that finite differences confirm?"""

import numpy as np
import pytest

from mlsys_lab.peft.qlora import (
    ADAPTERS,
    BASE,
    base_weights,
    init_qlora_state,
    lora_linear,
    lora_linear_backward,
    qlora_loss,
    qlora_loss_and_grads,
    qlora_step,
    shifted_task,
    train_qlora,
)


def _state(seed=0, zero_b=False, block_size=64):
    g = np.random.default_rng(seed)
    return init_qlora_state(g.normal(0, 0.2, (11, 13)), g.normal(0, 0.3, (13, 3)), rank=2, scale=1.5,
                            block_size=block_size, seed=seed, zero_b=zero_b)


def test_lora_linear_backward_matches_finite_differences_of_a_scalar_loss():
    g = np.random.default_rng(1)
    x, w, a, b, dy = g.normal(size=(3, 5)), g.normal(size=(5, 4)), g.normal(size=(5, 2)), g.normal(size=(2, 4)), \
        g.normal(size=(3, 4))
    dx, da, db = lora_linear_backward(x, w, a, b, 0.7, dy)
    for array, grad in ((x, dx), (a, da), (b, db)):
        i = tuple(int(g.integers(0, s)) for s in array.shape)
        old = array[i]
        array[i] = old + 1e-6
        plus = float((lora_linear(x, w, a, b, 0.7) * dy).sum())
        array[i] = old - 1e-6
        minus = float((lora_linear(x, w, a, b, 0.7) * dy).sum())
        array[i] = old
        assert grad[i] == pytest.approx((plus - minus) / 2e-6, rel=1e-6)


@pytest.mark.parametrize("block_size", [64, 16])
def test_adapter_gradients_match_finite_differences(block_size):
    state = _state(block_size=block_size)
    g = np.random.default_rng(2)
    x, labels = g.normal(size=(9, 11)), g.integers(0, 3, size=9)
    _, grads = qlora_loss_and_grads(state, x, labels)
    assert set(grads) == set(ADAPTERS)
    for name in ADAPTERS:
        i = tuple(int(g.integers(0, s)) for s in state[name].shape)
        old = state[name][i]
        state[name][i] = old + 1e-6
        plus = qlora_loss(state, x, labels)
        state[name][i] = old - 1e-6
        minus = qlora_loss(state, x, labels)
        state[name][i] = old
        assert grads[name][i] == pytest.approx((plus - minus) / 2e-6, rel=1e-5, abs=1e-9), name


def test_a_step_leaves_the_nf4_base_bit_for_bit_and_moves_only_the_adapters():
    state = _state()
    x, labels = np.random.default_rng(3).normal(size=(8, 11)), np.arange(8) % 3
    new, loss = qlora_step(state, x, labels, 0.1)
    assert loss == qlora_loss(state, x, labels)
    for key in BASE:
        assert new[key] is state[key]
    assert all(not np.array_equal(new[k], state[k]) for k in ADAPTERS)


def test_zero_b_start_is_the_nf4_base_and_training_lowers_the_loss():
    g = np.random.default_rng(4)
    w1, w2 = g.normal(0, 32 ** -0.5, (32, 64)), g.normal(0, 64 ** -0.5, (64, 4))
    state = init_qlora_state(w1, w2, rank=4, scale=2.0)
    q1, q2 = base_weights(state)
    assert q1.shape == w1.shape and np.abs(q1 - w1).max() < 0.2 * np.abs(w1).max()
    x, labels = shifted_task(w1, w2, 256, seed=4, shift=2.0)
    z = np.maximum(x @ q1, 0) @ q2  # B = 0: the model is the dequantized base
    assert qlora_loss(state, x, labels) == pytest.approx(
        float(-np.log(np.exp(z - z.max(1, keepdims=True))[np.arange(256), labels]
                     / np.exp(z - z.max(1, keepdims=True)).sum(1)).mean()), rel=1e-9)
    final, losses = train_qlora(state, x, labels, 60, 0.2)
    assert qlora_loss(final, x, labels) < 0.7 * losses[0]
    assert all(np.array_equal(final[k], state[k]) for k in BASE)


def test_bad_inputs_name_the_parameter():
    g = np.random.default_rng(0)
    with pytest.raises(ValueError, match="share h"):
        init_qlora_state(g.normal(size=(4, 5)), g.normal(size=(6, 2)))
    with pytest.raises(ValueError, match="rank"):
        init_qlora_state(g.normal(size=(4, 5)), g.normal(size=(5, 2)), rank=3)
    with pytest.raises(ValueError, match="lr"):
        qlora_step(_state(), np.zeros((2, 11)), np.zeros(2, int), -1.0)
