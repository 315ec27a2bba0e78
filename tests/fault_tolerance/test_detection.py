"""Do simulated flight records look like a synchronous job, and does the real watchdog name the hung rank?"""

import numpy as np
import pytest

from mlsys_lab.exercises.fault_tolerance_failures import reference_diagnose
from mlsys_lab.fault_tolerance.detection import run_ranks, simulate_trace


def test_a_healthy_trace_is_synchronous():
    enter, leave = simulate_trace(8, 20, seed=1, comm_seconds=0.1)
    assert not np.isnan(enter).any() and not np.isnan(leave).any()
    assert np.all(leave.min(axis=1) >= enter.max(axis=1) + 0.1)  # nobody leaves before everyone entered
    assert np.all(enter[1:] > leave[:-1])  # each step starts after the rank left the last collective
    assert reference_diagnose(enter, leave, 5.0) == {"hang_step": None, "hung_ranks": [], "detected_at": None,
                                                     "stragglers": []}


def test_hang_late_entry_and_straggler():
    enter, leave = simulate_trace(6, 12, seed=2, slow={4: 1.6}, hang=(7, [1]), arrive_at={(3, 5): 2.0})
    assert np.isnan(enter[7, 1]) and np.isnan(enter[8:]).all() and np.isnan(leave[7:]).all()
    assert enter[3, 5] == np.delete(enter[3], 5).min() + 2.0
    found = reference_diagnose(enter, leave, 2.0)  # the late entry is exactly at the deadline: in time
    assert found["hang_step"] == 7 and found["hung_ranks"] == [1] and found["stragglers"] == [4]
    assert found["detected_at"] == pytest.approx(np.nanmin(enter[7]) + 2.0)
    step_times = np.diff(enter[:7], axis=0)
    assert np.ptp(np.median(step_times, axis=0)) < 0.05  # step times hide the straggler


def test_real_processes_and_watchdog():
    run = run_ranks(n_ranks=3, n_steps=6, compute_seconds=0.01, slow=(0, 2.0), hang=(1, 3), timeout_seconds=0.3)
    dog = run["watchdog"]
    assert dog["step"] == 3 and dog["ranks"] == [1]
    assert dog["fired_at"] - dog["first_entered"] >= 0.3
    assert np.isnan(run["enter"][3, 1]) and not np.isnan(run["enter"][:3]).any()


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="n_ranks"):
        simulate_trace(1, 10)
    with pytest.raises(ValueError, match="timeout_seconds"):
        run_ranks(timeout_seconds=0)
