"""On a GPU the capstone's loss is a fused CUDA kernel's (the learner's, else the course's): the adapter from the
kernel's (loss, softmax − onehot) in float32 to the model's operator, checked here with the kernel's NumPy reference
standing in for it, and on a GPU with the course's kernel itself."""

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.capstone.gpu_loss import kernel_cross_entropy
from mlsys_lab.capstone.model import GPTConfig, ModelOps, course_ops, init_theta, loss_and_grad
from mlsys_lab.capstone.stack import GPU_PIECES, PIECES, active_pieces, pieces_rows
from mlsys_lab.kernels.training_memory.softmax_xent import softmax_xent_reference


def float32_reference(logits, labels):
    """The kernel's contract on NumPy arrays: float32 in, float32 (loss, dlogits) out."""
    loss, dlogits = softmax_xent_reference(np.asarray(logits), np.asarray(labels))
    return loss.astype(np.float32), dlogits.astype(np.float32)


def test_the_adapter_gives_the_operator_of_the_model_within_float32():
    g = np.random.default_rng(0)
    logits, labels = 4 * g.standard_normal((37, 65)), g.integers(0, 65, 37)
    grad_out = np.full(37, 1 / 37)
    losses, grads = kernel_cross_entropy(float32_reference)(logits, labels, 0.0, grad_out)
    want_losses, want_grads = course_ops().cross_entropy(logits, labels, 0.0, grad_out)
    assert losses.dtype == grads.dtype == np.float64
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    np.testing.assert_allclose(grads, want_grads, atol=1e-8)  # 1/37 of float32 round-off
    with pytest.raises(ValueError, match="label_smoothing"):
        kernel_cross_entropy(float32_reference)(logits, labels, 0.1, grad_out)


def test_a_training_step_on_the_kernels_loss_matches_the_course_operator():
    config = GPTConfig(d_model=32, n_heads=2, n_layers=1, context=16)
    theta = init_theta(config, seed=1)
    g = np.random.default_rng(1)
    idx = g.integers(0, config.vocab_size, (3, 16))
    targets = g.integers(0, config.vocab_size, (3, 16))
    ops = course_ops()
    kernel_ops = ModelOps(kernel_cross_entropy(float32_reference), ops.layer_norm_backward, ops.attention_backward)
    loss, grad = loss_and_grad(theta, idx, targets, config, ops)
    kernel_loss, kernel_grad = loss_and_grad(theta, idx, targets, config, kernel_ops)
    assert kernel_loss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(kernel_grad, grad, rtol=1e-4, atol=1e-7)


def test_the_kernel_piece_runs_only_where_a_gpu_answers():
    names = [name for name, *_ in active_pieces()]
    assert ("softmax_xent_cuda" in names) == backend.on_gpu and len(names) == len(PIECES) + backend.on_gpu * len(
        GPU_PIECES)
    rows = {row["piece"]: row["runs"] for row in pieces_rows()}
    if backend.on_gpu:
        assert rows["softmax_cross_entropy"].startswith("not here")
    else:
        assert rows["softmax_xent_cuda"] == "not here: needs a CUDA GPU (softmax_cross_entropy runs instead)"


@pytest.mark.skipif(not backend.on_gpu, reason=f"the course's CUDA kernel needs a GPU ({backend.describe()})")
def test_on_a_gpu_the_course_kernel_gives_the_operator():
    from mlsys_lab.kernels.training_memory.softmax_xent import softmax_xent_on_gpu

    g = np.random.default_rng(2)
    logits, labels = 4 * g.standard_normal((64, 65)), g.integers(0, 65, 64)
    grad_out = np.full(64, 1 / 64)
    losses, grads = kernel_cross_entropy(softmax_xent_on_gpu)(logits, labels, 0.0, grad_out)
    want_losses, want_grads = course_ops().cross_entropy(logits, labels, 0.0, grad_out)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    np.testing.assert_allclose(grads, want_grads, atol=1e-7)
