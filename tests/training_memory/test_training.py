"""Does the residual MLP train with the floor's optimizers, and do its helpers compute what they say?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import SGD, Adam, accuracy
from mlsys_lab.training_memory.autodiff import Tape, Tensor
from mlsys_lab.training_memory.diff_modes import numerical_gradient
from mlsys_lab.training_memory.training import (
    forward_loss,
    fresh_adam_steps,
    loss_with_parameter,
    make_mlp,
    random_batch,
    spiral_data,
    train_mlp,
    train_mlp_step,
)


def test_named_parameters_follow_the_layers():
    model = make_mlp(3, 4, 2, 5)
    names = list(model.named_parameters)
    assert names == ["stem.w", "stem.b", "blocks.0.w1", "blocks.0.b1", "blocks.0.w2",
                     "blocks.1.w1", "blocks.1.b1", "blocks.1.w2", "head.w", "head.b"]
    assert model.named_parameters["blocks.1.w1"] is model.blocks[1][0]
    assert model.n_params == 3 * 4 + 4 + 2 * (2 * 4 * 16 + 16) + 4 * 5 + 5


def test_sgd_step_is_theta_minus_lr_times_gradient_on_the_model_arrays():
    model = make_mlp(2, 3, 1, 2, dtype=xp.float64)
    x, labels = random_batch(4, 2, 2)
    before = {name: asnumpy(p.data).copy() for name, p in model.named_parameters.items()}
    held = model.stem[0].data  # the update is in place: arrays held elsewhere see it
    train_mlp_step(model, SGD(0.5), x.astype(xp.float64), labels)
    for name, p in model.named_parameters.items():
        np.testing.assert_allclose(asnumpy(p.data), before[name] - 0.5 * asnumpy(p.grad), rtol=1e-12)
    assert model.stem[0].data is held


def test_adam_keys_its_state_by_parameter_name():
    model, adam = fresh_adam_steps(4, 8, 2, 3, 16, n_steps=3)
    assert adam.step_count == 3 and set(adam.m) == set(model.named_parameters)
    assert adam.m["blocks.0.w1"].shape == (8, 32)
    assert adam.state_bytes == 2 * 4 * model.n_params  # two fp32 moments per parameter


def test_random_batch_is_reproducible_and_in_range():
    x, labels = random_batch(50, 3, 4, seed=1)
    assert x.shape == (50, 3) and x.dtype == xp.float32
    assert int(labels.min()) >= 0 and int(labels.max()) <= 3
    np.testing.assert_array_equal(asnumpy(random_batch(50, 3, 4, seed=1)[0]), asnumpy(x))


def test_loss_with_parameter_restores_it_and_matches_the_tape_gradient():
    g = np.random.default_rng(0)
    model = make_mlp(4, 8, 2, 3, dtype=xp.float64)
    x, labels = xp.asarray(g.standard_normal((16, 4))), xp.asarray(g.integers(0, 3, 16))
    w = model.blocks[0][0]
    original = w.data
    assert loss_with_parameter(model, w, asnumpy(w.data), x, labels) == pytest.approx(
        float(forward_loss(model, Tensor(x), labels).data), rel=1e-15)
    assert w.data is original
    tape = Tape()
    tape.backward(forward_loss(model, Tensor(x, tape), labels))
    numeric = numerical_gradient(lambda v: loss_with_parameter(model, w, v, x, labels), asnumpy(w.data))
    np.testing.assert_allclose(asnumpy(w.grad), numeric, rtol=1e-5, atol=1e-8)


def test_adam_learns_the_spirals_and_zero_init_does_not():
    x, y = spiral_data(100)
    scaled, zeros = make_mlp(2, 32, 2, 3), make_mlp(2, 32, 2, 3, init="zeros")
    train_mlp(scaled, x, y, optimizer=Adam(lr=0.02), batch_size=32, n_epochs=60)
    train_mlp(zeros, x, y, optimizer=Adam(lr=0.02), batch_size=32, n_epochs=60)
    assert accuracy(scaled.logits(x), y) > 0.9
    assert accuracy(zeros.logits(x), y) < 0.5  # symmetric units stay equal: no better than a linear guess


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="batch_size"):
        train_mlp(make_mlp(2, 4, 1, 3), *spiral_data(5), optimizer=SGD(0.1), batch_size=0, n_epochs=1)
    with pytest.raises(ValueError, match="init"):
        make_mlp(2, 4, 1, 3, init="ones")
