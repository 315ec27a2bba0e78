"""Bucketed all-reduce overlapped with backward, and stale-synchronous finish times, against hand-worked cases."""

import numpy as np
import pytest

from mlsys_lab.collectives import cost, overlap


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
