"""Does the Monte-Carlo job agree with the exact model, and does its optimum sit near √(2CM)?"""

import numpy as np
import pytest

from mlsys_lab.fault_tolerance import reliability as fault
from mlsys_lab.fault_tolerance import simulate as fault_sim


def test_simulated_goodput_converges_to_the_exact_model():
    m, c, r = 3600.0, 30.0, 300.0
    tau = np.array([100.0, 464.0, 2000.0, 5000.0])
    simulated = fault_sim.simulate_goodput(tau, c, r, m, n_failures=40_000, seed=1)
    assert simulated == pytest.approx(fault.expected_goodput(tau, c, r, m), abs=0.006)


@pytest.mark.parametrize("c_over_m", [1e-4, 1e-3, 3e-3, 1e-2, 3e-2])
@pytest.mark.parametrize("r_over_m", [0.0, 0.05])
def test_simulated_optimum_within_15_percent_of_young(c_over_m, r_over_m):
    m = 7200.0
    best, _, _ = fault_sim.simulated_optimum(c_over_m * m, r_over_m * m, m, seed=2)
    assert best == pytest.approx(fault.young_daly_interval(c_over_m * m, m), rel=0.15)


def test_young_breaks_down_when_checkpoints_cost_a_fifth_of_the_mttf():
    m, c = 1000.0, 200.0
    best, _, _ = fault_sim.simulated_optimum(c, 0.0, m, seed=3)
    assert best == pytest.approx(fault.optimal_interval(c, m), rel=0.1)
    assert fault.young_daly_interval(c, m) > 1.2 * best  # √(2CM) = 632 vs 507


def test_async_checkpoint_stalls_less_and_counts_later():
    m, tau = 3600.0, 600.0
    blocking = fault_sim.simulate_goodput([tau], 60.0, 120.0, m, 20_000, seed=4)[0]
    asynchronous = fault_sim.simulate_goodput([tau], 2.0, 120.0, m, 20_000, seed=4, write_seconds=60.0)[0]
    assert asynchronous > blocking
    # with W = 0 the asynchronous formula is the blocking one
    same = fault_sim.simulate_goodput([tau], 60.0, 120.0, m, 5000, seed=5, write_seconds=0.0)
    assert same == pytest.approx(fault_sim.simulate_goodput([tau], 60.0, 120.0, m, 5000, seed=5))


def test_committed_work_per_gap_by_hand():
    gaps = np.array([[1000.0, 1000.0, 100.0]])
    # first gap: ⌊1000/(300+30)⌋ = 3 segments; later gaps pay R = 50 first: ⌊950/330⌋ = 2; 100 < 50+330: 0
    assert fault_sim.committed_work(gaps, 300.0, 30.0, 50.0).tolist() == [[900.0, 600.0, 0.0]]


def test_finite_job_matches_the_expectation_and_the_timeline_is_consistent():
    job = fault_sim.simulate_job(10 * 86400.0, 464.0, 30.0, 300.0, 3600.0, n_trials=200, seed=6)
    expected = fault.expected_goodput(464.0, 30.0, 300.0, 3600.0)
    assert job["goodput"].mean() == pytest.approx(expected, rel=0.01)
    assert np.all(job["wall_seconds"] >= 10 * 86400.0)
    t, work, failures = fault_sim.timeline(20_000.0, 2000.0, 60.0, 300.0, 3600.0, seed=7)
    assert work[-1] == 20_000.0 and np.all(np.diff(t) >= 0)
    assert t[-1] >= 20_000.0 + 10 * 60.0 + len(failures) * 300.0 - 1e-6


def test_elastic_beats_restart_when_spares_are_short():
    kw = dict(n_replicas=16, replica_mttf_seconds=48 * 3600.0, repair_seconds=12 * 3600.0, interval=1800.0,
              checkpoint_seconds=60.0, restart_seconds=600.0, reform_seconds=120.0,
              horizon_seconds=2 * 86400.0, n_trials=16, seed=8)
    restart = fault_sim.simulate_elastic("restart", n_spares=0, **kw)["goodput"].mean()
    elastic = fault_sim.simulate_elastic("elastic", n_spares=0, **kw)["goodput"].mean()
    plenty = fault_sim.simulate_elastic("restart", n_spares=16, **kw)["goodput"].mean()
    assert elastic > 3 * restart
    assert plenty > 0.8 and elastic < 1.0
    with pytest.raises(ValueError, match="policy"):
        fault_sim.simulate_elastic("pray", n_spares=0, **kw)


def test_failure_log_is_sorted_uniform_in_the_window():
    from mlsys_lab.fault_tolerance.simulate import failure_log

    log = failure_log(466, 54 * 86400.0, seed=3)
    assert log.shape == (466,) and np.all(np.diff(log) >= 0) and 0 <= log[0] and log[-1] <= 54 * 86400.0
    assert failure_log(0, 10.0).shape == (0,)
    with pytest.raises(ValueError, match="seconds"):
        failure_log(3, -1.0)
