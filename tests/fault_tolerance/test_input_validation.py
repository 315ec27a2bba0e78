"""Do the reliability formulas and the simulators reject infinite times, strings and bad seeds by name (issue #19)?"""

import math

import numpy as np
import pytest

from mlsys_lab.fault_tolerance import reliability, simulate, storage


@pytest.mark.parametrize("call, text", [
    (lambda: reliability.cluster_mttf(math.inf, 8), r"component_mttf must be a finite number > 0"),
    (lambda: reliability.expected_failures(3600.0, 0.0, 8), r"component_mttf_seconds must be a number > 0"),
    (lambda: reliability.first_order_goodput("ab", 60.0, 60.0, 3600.0), r"interval must be an array of numbers"),
    (lambda: reliability.goodput_at_optimum(math.inf, 60.0, 3600.0), r"checkpoint_seconds must hold finite"),
    (lambda: reliability.young_daly_interval(1.7e308, 1e10), r"checkpoint_cost · mttf must be below"),
    (lambda: simulate.failure_gaps(3600.0, 10, seed=-1), r"seed must be an integer >= 0"),
    (lambda: simulate.failure_gaps(3600.0, 10**30), r"n_gaps must be an integer between 1 and"),
    (lambda: simulate.committed_work(0, 60.0, 1.0, 1.0), r"gaps must have 1 or 2 dimensions"),
    (lambda: simulate.simulate_goodput(np.array([0.0]), 1.0, 1.0, 3600.0), r"intervals must be > 0 seconds"),
    (lambda: simulate.simulate_job(1e30, 60.0, 1.0, 1.0, 3600.0), r"work_seconds=1e\+30 is"),
    (lambda: simulate.simulated_optimum(1.0, 1.0, 3600.0, n_points=0), r"n_points must be an integer between 3"),
    (lambda: storage.hdd_write_seconds(10, math.inf, 4), r"total_bytes must be a finite number"),
    (lambda: storage.checkpoint_bytes(math.inf), r"n_params must be a finite number > 0"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()
