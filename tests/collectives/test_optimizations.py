"""Gradient compression, stale-synchronous updates and bucketed overlap: do they do what the lesson says?"""

import numpy as np
import pytest

from mlsys_lab.collectives import cost, overlap
from mlsys_lab.collectives import gradient_compression as compression


def test_top_k_keeps_the_largest_magnitudes():
    v = np.array([0.1, -5.0, 3.0, -0.2, 4.0])
    index, values = compression.top_k(v, 2)
    assert sorted(index.tolist()) == [1, 4] and sorted(values.tolist()) == [-5.0, 4.0]
    assert compression.top_k(v, 0)[0].size == 0
    with pytest.raises(ValueError, match="k"):
        compression.top_k(v, 6)


def test_orthonormalize_gives_orthonormal_columns():
    q = compression.orthonormalize(np.random.default_rng(0).standard_normal((20, 3)))
    np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-12)


@pytest.fixture(scope="module")
def problem():
    return compression.make_problem(n_workers=4, n_in=32, n_out=16, seed=0)


def test_dense_run_sends_ring_bytes_and_converges(problem):
    run = compression.train(problem, "none", steps=150)
    assert run.bytes_per_step == 2 * 3 / 4 * 32 * 16 * 4
    assert run.losses[-1] < 1e-2 * run.losses[0]


@pytest.mark.parametrize("method", ["topk", "powersgd"])
def test_error_feedback_helps_and_bytes_shrink(problem, method):
    with_feedback = compression.train(problem, method, error_feedback=True, steps=150)
    without = compression.train(problem, method, error_feedback=False, steps=150)
    assert with_feedback.losses[-1] < 0.5 * without.losses[-1]
    assert with_feedback.bytes_per_step < 0.1 * (2 * 3 / 4 * 32 * 16 * 4)


def test_powersgd_bytes_are_rank_times_rows_plus_columns(problem):
    run = compression.train(problem, "powersgd", steps=2, rank=2)
    assert run.bytes_per_step == 2 * 3 / 4 * (32 * 2 + 16 * 2) * 4


def test_staleness_zero_converges_and_large_staleness_hurts(problem):
    fresh, stale = (
        compression.train_stale(problem, 0, steps=150),
        compression.train_stale(problem, 16, steps=150),
    )
    assert fresh[-1] < 1e-2 * fresh[0]
    assert stale[-1] > 10 * fresh[-1]


def test_make_buckets_hand_worked():
    assert overlap.make_buckets([10, 10, 30, 5, 5], 20) == [[0, 1], [2], [3, 4]]


def test_timeline_invariants():
    seconds, grad_bytes = overlap.transformer_gradients(n_layers=6, d_model=512)
    assert grad_bytes.sum() == 6 * 12 * 512**2 * 4
    alpha, beta = 10e-6, 1 / 50e9
    for bucket in (1e6, 8e6, 1e9):
        t = overlap.bucketed_timeline(seconds, grad_bytes, bucket, 16, alpha, beta)
        assert sorted(i for b in t.buckets for i in b) == list(range(24))
        busy = sum(end - start for start, end, _ in t.comm)
        assert busy == pytest.approx(
            sum(cost.allreduce_time("ring", n, 16, alpha, beta) for _, _, n in t.comm)
        )
        assert t.step_seconds >= max(t.backward_seconds, busy)
        late = overlap.bucketed_timeline(seconds, grad_bytes, bucket, 16, alpha, beta, overlap=False)
        assert late.step_seconds == pytest.approx(t.backward_seconds + busy)
        assert t.step_seconds <= late.step_seconds


def test_ssp_finish_times_hand_worked():
    compute = np.array([[1.0, 3.0], [1.0, 1.0], [1.0, 1.0]])
    bsp = overlap.ssp_finish_times(compute, 0)
    np.testing.assert_allclose(bsp, [[1, 3], [4, 4], [5, 5]])
    free = overlap.ssp_finish_times(compute, 10)
    np.testing.assert_allclose(free, np.cumsum(compute, axis=0))
    with pytest.raises(ValueError, match="staleness"):
        overlap.ssp_finish_times(compute, -1)
