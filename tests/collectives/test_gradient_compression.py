"""Top-k, PowerSGD and error feedback on a real small training run, and stale-synchronous SGD: do they do
what the lesson says, and are the bytes the simulated network counted?"""

import numpy as np
import pytest

from mlsys_lab.collectives.gradient_compression import (
    make_least_squares_problem,
    orthonormalize,
    top_k,
    train_compressed,
    train_stale,
)


def test_top_k_keeps_the_largest_magnitudes():
    v = np.array([0.1, -5.0, 3.0, -0.2, 4.0])
    index, values = top_k(v, 2)
    assert sorted(index.tolist()) == [1, 4] and sorted(values.tolist()) == [-5.0, 4.0]
    assert top_k(v, 0)[0].size == 0
    with pytest.raises(ValueError, match="k"):
        top_k(v, 6)


def test_orthonormalize_gives_orthonormal_columns():
    q = orthonormalize(np.random.default_rng(0).standard_normal((20, 3)))
    np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-12)


@pytest.fixture(scope="module")
def problem():
    return make_least_squares_problem(n_workers=4, n_in=32, n_out=16, seed=0)


def test_dense_run_sends_ring_bytes_and_converges(problem):
    run = train_compressed(problem, "none", steps=150)
    assert run.bytes_per_step == 2 * 3 / 4 * 32 * 16 * 4
    assert run.losses[-1] < 1e-2 * run.losses[0]


@pytest.mark.parametrize("method", ["topk", "powersgd"])
def test_error_feedback_helps_and_bytes_shrink(problem, method):
    with_feedback = train_compressed(problem, method, error_feedback=True, steps=150)
    without = train_compressed(problem, method, error_feedback=False, steps=150)
    assert with_feedback.losses[-1] < 0.5 * without.losses[-1]
    assert with_feedback.bytes_per_step < 0.1 * (2 * 3 / 4 * 32 * 16 * 4)


def test_powersgd_bytes_are_rank_times_rows_plus_columns(problem):
    run = train_compressed(problem, "powersgd", steps=2, rank=2)
    assert run.bytes_per_step == 2 * 3 / 4 * (32 * 2 + 16 * 2) * 4


def test_staleness_zero_converges_and_large_staleness_hurts(problem):
    fresh, stale = (
        train_stale(problem, 0, steps=150),
        train_stale(problem, 16, steps=150),
    )
    assert fresh[-1] < 1e-2 * fresh[0]
    assert stale[-1] > 10 * fresh[-1]
