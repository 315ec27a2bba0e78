"""Do the per-axis thresholds mark where compute time equals communication time?"""

import pytest

from mlsys_lab.collectives.cost import allreduce_time, collective_time
from mlsys_lab.parallelism.bounds import dp_critical_tokens, pp_critical_width_layers, tp_critical_hidden

C, W = 989.5e12, 450e9


@pytest.mark.parametrize("n", [2, 8, 64])
def test_dp_threshold_balances_backward_and_all_reduce(n):
    b, psi = dp_critical_tokens(C, W, n), 7e9
    assert b == pytest.approx((n - 1) / n * C / W)
    assert 4 * psi * b / C == pytest.approx(allreduce_time("ring", 2 * psi, n, 0.0, 1 / W))
    b3 = dp_critical_tokens(C, W, n, sharded=True)
    assert 6 * psi * b3 / C == pytest.approx(3 * collective_time("all_gather", 2 * psi, n, 0.0, 1 / W))


@pytest.mark.parametrize("t", [2, 8, 16])
def test_tp_threshold_balances_layer_compute_and_four_all_reduces(t):
    h, n = tp_critical_hidden(C, W, t), 2048
    assert h == pytest.approx(2 * (t - 1) * C / (9 * W))
    assert 72 * n * h * h / (t * C) == pytest.approx(4 * allreduce_time("ring", 2 * n * h, t, 0.0, 1 / W))


def test_pp_threshold_and_bad_input():
    assert pp_critical_width_layers(C, W) == pytest.approx(C / (12 * W))
    with pytest.raises(ValueError, match="link_bytes_per_s"):
        dp_critical_tokens(C, 0.0, 8)
    with pytest.raises(ValueError, match="tp"):
        tp_critical_hidden(C, W, 0)
