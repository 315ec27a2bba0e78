"""Does the reverse-mode engine give the right gradients, and does its tape count the right bytes?"""

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.backend import xp
from mlsys_lab.training_memory.accounting import mlp_step_bytes
from mlsys_lab.training_memory.autodiff import Tape, Tensor, add, matmul, mse_loss, relu, softmax_cross_entropy, tanh
from mlsys_lab.training_memory.diff_modes import numerical_gradient
from mlsys_lab.training_memory.training import forward_loss, make_mlp


def _loss_and_grads(w1, b1, w2, x, labels):
    tape = Tape()
    params = [Tensor(backend.xp.asarray(p), requires_grad=True) for p in (w1, b1, w2)]
    h = tanh(add(matmul(Tensor(backend.xp.asarray(x), tape), params[0]), params[1]))
    loss = softmax_cross_entropy(matmul(relu(h), params[2]), backend.xp.asarray(labels))
    tape.backward(loss)
    return float(loss.data), [backend.asnumpy(p.grad) for p in params]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_match_central_differences_on_random_inputs(seed):
    g = np.random.default_rng(seed)
    x, labels = g.normal(size=(5, 4)), g.integers(0, 3, 5)
    w1, b1, w2 = g.normal(size=(4, 6)), g.normal(size=6), g.normal(size=(6, 3))
    _, grads = _loss_and_grads(w1, b1, w2, x, labels)
    for index, p in enumerate((w1, b1, w2)):
        def f(value, index=index):
            args = [w1, b1, w2]
            args[index] = value
            return _loss_and_grads(*args, x, labels)[0]
        np.testing.assert_allclose(grads[index], numerical_gradient(f, p), rtol=1e-5, atol=1e-7)


def test_mse_gradient_and_parameter_used_twice_accumulates():
    """Is a parameter used twice given the sum of both paths (the multivariate chain rule)?"""
    w = Tensor(xp.asarray([[2.0]]), requires_grad=True)
    tape = Tape()
    x = Tensor(xp.asarray([[3.0]]), tape)
    loss = mse_loss(matmul(matmul(x, w), w), xp.asarray([[0.0]]))  # L = ½ (x w²)², dL/dw = 2 x² w³ = 144
    tape.backward(loss)
    assert float(loss.data) == pytest.approx(72.0)
    assert float(w.grad[0, 0]) == pytest.approx(144.0)


def test_no_tape_records_nothing_and_input_gets_no_gradient():
    w = Tensor(xp.ones((2, 2)), requires_grad=True)
    y = matmul(Tensor(xp.ones((1, 2))), w)
    assert y.tape is None
    tape = Tape()
    x = Tensor(xp.ones((1, 2)), tape)
    tape.backward(mse_loss(matmul(x, w), xp.zeros((1, 2))))
    assert x.grad is None and w.grad is not None


def test_tape_counts_each_saved_array_once_and_frees_on_backward():
    """tanh keeps its output and the next matmul keeps the same array: counted once."""
    tape = Tape()
    x = Tensor(xp.ones((8, 4), dtype=xp.float32), tape)
    w = Tensor(xp.ones((4, 4), dtype=xp.float32), requires_grad=True)
    h = tanh(matmul(x, w))
    out = matmul(h, w)
    assert tape.saved_bytes == 2 * 8 * 4 * 4  # x and h, w not counted (it is a weight)
    tape.backward(mse_loss(out, xp.zeros((8, 4), dtype=xp.float32)))
    assert tape.saved_bytes == 0 and tape.peak_saved_bytes == 2 * 128 + 128  # + the loss residual


@pytest.mark.parametrize("n_blocks", [1, 4, 9])
def test_tape_bytes_equal_the_shape_estimate_and_grow_linearly_with_depth(n_blocks):
    model = make_mlp(16, 32, n_blocks, 5)
    x = backend.xp.asarray(np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32))
    labels = backend.xp.asarray(np.arange(64) % 5)
    tape = Tape()
    forward_loss(model, Tensor(x, tape), labels)
    assert tape.saved_bytes == mlp_step_bytes(16, 32, n_blocks, 5, 64).activations
