"""The fused softmax cross-entropy kernel's CPU side: is its NumPy reference right, are the byte counts and the block
size what the lesson says, and do the exercise's cases and comparison judge what they should?"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.exercises.training_memory_cuda import _compare, softmax_xent_cases
from mlsys_lab.exercises.training_memory_references import reference_softmax_cross_entropy
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.training_memory.softmax_xent import (
    softmax_xent_bytes,
    softmax_xent_on_gpu,
    softmax_xent_reference,
    threads_for,
    unfused_softmax_xent_bytes,
)


def test_reference_matches_the_hand_worked_example():
    """z = [[2, 1, 0], [0, 0, 0]], labels [0, 2]: loss log(e² + e + 1) − 2 and log 3; p − onehot by hand."""
    loss, grad = softmax_xent_reference(np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32),
                                        np.array([0, 2], dtype=np.int32))
    total = math.e ** 2 + math.e + 1
    assert loss == pytest.approx([math.log(total) - 2, math.log(3)], rel=1e-15)
    assert grad == pytest.approx(np.array([[math.e ** 2 / total - 1, math.e / total, 1 / total],
                                           [1 / 3, 1 / 3, 1 / 3 - 1]]), rel=1e-15)
    assert loss[0] == pytest.approx(0.4076, abs=5e-5) and grad[0] == pytest.approx([-0.3348, 0.2447, 0.0900], abs=5e-5)


def test_reference_matches_the_lessons_fused_operator_with_unit_upstream_gradient():
    """Is it exercise 6's softmax cross-entropy with no smoothing and g = 1 on every row (the gradient of the sum)?"""
    g = np.random.default_rng(3)
    logits = 4 * g.standard_normal((7, 11))
    labels = g.integers(0, 11, size=7)
    loss, grad = softmax_xent_reference(logits, labels)
    want_loss, want_grad = reference_softmax_cross_entropy(logits, labels, 0.0, np.ones(7))
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)


def test_reference_is_safe_at_large_logits_and_at_the_boundaries():
    """Logits of ±10⁴ (exp overflows unshifted), one class, equal logits, no token."""
    loss, grad = softmax_xent_reference(np.array([[1e4, -1e4, 1e4]], dtype=np.float32), np.array([2]))
    assert loss == pytest.approx([math.log(2)]) and grad == pytest.approx(np.array([[0.5, 0.0, -0.5]]))
    loss, grad = softmax_xent_reference(np.full((3, 1), 5.0), np.zeros(3, dtype=np.int32))
    assert np.array_equal(loss, np.zeros(3)) and np.array_equal(grad, np.zeros((3, 1)))
    loss, grad = softmax_xent_reference(np.full((1, 4), 7.0), np.array([3]))
    assert loss == pytest.approx([math.log(4)]) and grad == pytest.approx(np.array([[0.25, 0.25, 0.25, -0.75]]))
    loss, grad = softmax_xent_reference(np.zeros((0, 5), dtype=np.float32), np.zeros(0, dtype=np.int32))
    assert loss.shape == (0,) and grad.shape == (0, 5)


@pytest.mark.parametrize(("logits", "labels", "match"), [
    (np.zeros((2, 3)), np.array([0, 3]), "labels must be in"),
    (np.zeros((2, 3)), np.array([0, -1]), "labels must be in"),
    (np.zeros((2, 3)), np.array([0]), "labels must have shape"),
    (np.zeros((2, 0)), np.zeros(2, dtype=int), "at least one class"),
    (np.array([[0.0, np.inf]]), np.array([0]), "finite"),
])
def test_reference_names_the_bad_argument(logits, labels, match):
    with pytest.raises(ValueError, match=match):
        softmax_xent_reference(logits, labels)


def test_byte_counts():
    """The fused minimum (read z, write dlogits: 8·T·V, plus labels and loss) is half the unfused chain's."""
    assert softmax_xent_bytes(4096, 32768) == 8 * 4096 * 32768 + 8 * 4096 == 2**30 + 32768
    assert unfused_softmax_xent_bytes(4096, 32768) - softmax_xent_bytes(4096, 32768) == 8 * 4096 * 32768 + 8 * 4096
    assert softmax_xent_bytes(0, 7) == 0
    with pytest.raises(ValueError, match="vocab"):
        softmax_xent_bytes(3, 0)


def test_threads_per_row_follow_the_vocabulary():
    """About V / 16 threads, a power of two from a warp to 1024."""
    assert [threads_for(v) for v in (1, 33, 1024, 8192, 32768, 50257)] == [32, 32, 64, 512, 1024, 1024]


@pytest.mark.skipif(backend.on_gpu, reason="a GPU answers here")
def test_launcher_says_it_needs_a_gpu():
    with pytest.raises(loader.GPUUnavailable, match="softmax_xent_on_gpu needs a CUDA GPU"):
        softmax_xent_on_gpu(np.zeros((2, 3), dtype=np.float32), np.zeros(2, dtype=np.int32))


@pytest.fixture(scope="module")
def cases():
    return softmax_xent_cases(np.random.default_rng(0))


def _reference_answer(case):
    loss, grad = softmax_xent_reference(*case.args)
    return loss.astype(np.float32), grad.astype(np.float32)


def test_cases_cover_the_boundaries(cases):
    """13 cases: no token, one class, two classes, ±10⁴, widths no multiple of a warp or block, GPT-2's 50,257."""
    shapes = [case.args[0].shape for case in cases]
    assert len(cases) == 13 and (0, 7) in shapes and (3, 1) in shapes and (5, 2) in shapes and (4, 50257) in shapes
    assert all(case.args[0].dtype == np.float32 and case.args[1].dtype == np.int32 for case in cases)
    assert any(np.abs(case.args[0]).max(initial=0) >= 1e4 for case in cases)
    assert sum(v % 32 != 0 for _, v in shapes) >= 8
    for case in cases[1:]:  # the first and the last class as labels wherever there are two rows
        labels, vocab = case.args[1], case.args[0].shape[1]
        if len(labels) >= 2:
            assert 0 in labels and vocab - 1 in labels, case.label


def test_cases_accept_the_reference_in_float32(cases):
    for case in cases:
        assert case.check_result(_reference_answer(case)) is None, case.label


def test_cases_accept_a_float32_sum_in_one_thread(cases):
    """Is a plain float32 sum along the row (one thread's order) accepted on GPT-2's vocabulary?"""
    case = next(c for c in cases if c.args[0].shape[1] == 50257)
    z, y = case.args
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = np.zeros((z.shape[0], 1), dtype=np.float32)
    for j in range(0, z.shape[1], 1024):  # sequential float32 accumulation, in blocks for speed
        s += e[:, j:j + 1024].sum(axis=1, keepdims=True, dtype=np.float32)
    rows = np.arange(z.shape[0])
    loss = ((m[:, 0] - z[rows, y]) + np.log(s[:, 0])).astype(np.float32)
    grad = (e / s).astype(np.float32)
    grad[rows, y] -= 1
    assert case.check_result((loss, grad)) is None


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda loss, grad: (loss, grad.astype(np.float64)), "dtype float64"),
    (lambda loss, grad: (loss[:, None], grad), "loss has shape"),
    (lambda loss, grad: (grad,), "return a pair"),
    (lambda loss, grad: (loss, np.full_like(grad, np.nan)), "NaN"),
    (lambda loss, grad: (loss, np.where(grad < 0, grad + 1, grad)), "the label's column"),
    (lambda loss, grad: (loss * 1.001, grad), "loss["),
])
def test_cases_name_what_is_wrong(cases, spoil, message):
    case = next(c for c in cases if c.args[0].shape == (9, 33))
    problem = case.check_result(spoil(*_reference_answer(case)))
    assert problem is not None and message in problem


def test_the_timed_comparison_is_real():
    """The timed case compares with the course's result (cases defer to their own check)."""
    loss, grad = np.ones(2, dtype=np.float32), np.zeros((2, 3), dtype=np.float32)
    expected = (loss.astype(np.float64), grad.astype(np.float64), np.ones(2))
    assert _compare((loss, grad), expected) and not _compare((loss + 1, grad), expected)
    assert _compare("anything", None)
