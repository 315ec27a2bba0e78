"""Does the simulated ZB-H1 schedule reach the paper's bubble, with 1F1B's peak memory?"""

import pytest

from mlsys_lab.parallelism.pp import simulate_schedule
from mlsys_lab.parallelism.zero_bubble import (
    idle_per_stage_seconds,
    in_flight_peak,
    simulate_fbw,
    zb_h1_idle_formula,
    zb_h1_orders,
)


@pytest.mark.parametrize(("p", "m"), [(4, 4), (4, 8), (8, 16), (8, 32), (2, 5), (1, 3)])
@pytest.mark.parametrize("times", [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (2.0, 1.0, 1.0), (1.0, 1.0, 0.5)])
def test_zb_h1_idle_is_the_papers_formula(p, m, times):
    events = simulate_fbw(zb_h1_orders(p, m), *times)
    assert idle_per_stage_seconds(events, m, *times) == pytest.approx(zb_h1_idle_formula(p, *times), abs=1e-9)
    tf, tb, tw = times
    fused = simulate_schedule(p, m, "1f1b", 1, forward_s=tf, backward_s=tb + tw)   # 1F1B: B and W together
    one_f_one_b_idle = max(e.end for e in fused) - m * (tf + tb + tw)
    assert one_f_one_b_idle == pytest.approx((p - 1) * (tf + tb + tw))
    assert idle_per_stage_seconds(events, m, *times) <= one_f_one_b_idle


@pytest.mark.parametrize(("p", "m"), [(4, 8), (4, 2), (6, 3), (8, 16)])
def test_zb_h1_runs_each_op_once_and_holds_at_most_p(p, m):
    orders = zb_h1_orders(p, m)
    for ops in orders:
        assert sorted(ops) == sorted((k, i) for k in "FBW" for i in range(m))
        assert in_flight_peak(ops) <= min(p, m)
    assert in_flight_peak(orders[0]) == min(p, m)              # stage 0, as 1F1B's


def test_simulator_respects_dependencies_and_finds_deadlocks():
    events = simulate_fbw(zb_h1_orders(3, 4))
    end = {(e.label, e.stream): e.end for e in events}
    start = {(e.label, e.stream): e.start for e in events}
    for i in range(4):
        assert start[(f"B{i}", "stage 0")] >= end[(f"B{i}", "stage 1")]
        assert start[(f"F{i}", "stage 2")] >= end[(f"F{i}", "stage 1")]
        assert start[(f"W{i}", "stage 1")] >= end[(f"B{i}", "stage 1")]
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate_fbw([[("B", 0), ("F", 0)], [("F", 0), ("B", 0)]])
    with pytest.raises(TypeError, match="kind in F, B, W"):
        simulate_fbw([[("X", 0)]])


@pytest.mark.parametrize("times", [(1.0, 2.0, 2.0), (1.0, 1.0, 1.5), (2.0, 1.0, 2.0)])
def test_a_long_w_leaves_the_formula_and_it_says_so(times):
    tf, tb, tw = times
    events = simulate_fbw(zb_h1_orders(4, 8), *times)
    assert idle_per_stage_seconds(events, 8, *times) == pytest.approx(3 * max(tf, tb))
    with pytest.raises(ValueError, match="weight_grad_s"):
        zb_h1_idle_formula(4, *times)
