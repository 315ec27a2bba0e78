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


# --- broadcasting on either side, and the primitives cross-entropy is composed of ----------------------------

from mlsys_lab.training_memory.autodiff import composed_softmax_cross_entropy, mul, sub, sum_over  # noqa: E402


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("bias_shape", [(3,), (1, 3), (4, 1), ()])
def test_broadcast_operand_gets_a_gradient_of_its_own_shape(op, bias_first, bias_shape):
    """Does ``bias + x`` (bias first) give the bias a gradient of the bias's shape, equal to central differences?"""
    g = np.random.default_rng(0)
    x_data, b_data = g.normal(size=(4, 3)), g.normal(size=bias_shape)
    fn = {"add": add, "sub": sub, "mul": mul}[op]

    def loss_of(x_value, b_value):
        tape = Tape()
        x = Tensor(xp.asarray(x_value), tape, requires_grad=True)
        b = Tensor(xp.asarray(b_value), requires_grad=True)
        y = fn(b, x) if bias_first else fn(x, b)
        loss = sum_over(sum_over(mul(y, y), axis=1), axis=0)
        tape.backward(loss)
        return float(loss.data), x, b

    _, x, b = loss_of(x_data, b_data)
    assert tuple(b.grad.shape) == bias_shape and tuple(x.grad.shape) == (4, 3)
    numerical = numerical_gradient(lambda v: loss_of(x_data, v)[0], np.array(b_data, dtype=float))
    np.testing.assert_allclose(backend.asnumpy(b.grad), numerical, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_composed_cross_entropy_matches_the_fused_op_and_survives_large_logits(smoothing):
    g = np.random.default_rng(1)
    for scale in (3.0, 1e4):
        z, labels, grad_out = scale * g.normal(size=(6, 5)), g.integers(0, 5, size=6), g.normal(size=6)
        tape = Tape()
        logits = Tensor(xp.asarray(z), tape, requires_grad=True)
        losses = composed_softmax_cross_entropy(logits, xp.asarray(labels), smoothing)
        tape.backward(losses, xp.asarray(grad_out))
        shifted = z - z.max(axis=1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        q = np.full(z.shape, smoothing / 5)
        q[np.arange(6), labels] += 1 - smoothing
        np.testing.assert_allclose(backend.asnumpy(losses.data), -(q * log_p).sum(axis=1), rtol=1e-13, atol=1e-9)
        np.testing.assert_allclose(backend.asnumpy(logits.grad), (np.exp(log_p) - q) * grad_out[:, None], atol=1e-13)
        assert tape.saved_bytes == 0
    if smoothing == 0.0:  # the engine's own fused op is the mean of the same losses
        tape = Tape()
        fused = softmax_cross_entropy(Tensor(xp.asarray(z), tape, requires_grad=True), xp.asarray(labels))
        assert float(fused.data) == pytest.approx(float(backend.asnumpy(losses.data).mean()), rel=1e-12)
