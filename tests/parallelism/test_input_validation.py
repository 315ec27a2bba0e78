"""Do ZeRO, the pipeline simulator and the planner reject bad input by name (issue #19)?"""

import math

import numpy as np
import pytest

from mlsys_lab.parallelism import planner, pp, zero


@pytest.mark.parametrize("call, text", [
    (lambda: zero.zero_memory_per_gpu(math.inf, 8, 1), r"n_params must be a finite number"),
    (lambda: zero.zero_memory_breakdown(1e9, 8, 3, offload_params=0), r"offload_params must be True or False"),
    (lambda: zero.zero_communication_bytes(1e9, 8, 1, ring=1), r"ring must be True or False"),
    (lambda: zero.offload_transfer_bytes(1e9, 1, bytes_per_param=-1), r"bytes_per_param must be a number > 0"),
    (lambda: zero.adam(np.zeros(3), "ab", np.zeros(3), np.zeros(3), 1, 1e-3), r"grad must be an array of numbers"),
    (lambda: zero.adam(np.zeros(3), np.zeros(4), np.zeros(3), np.zeros(3), 1, 1e-3), r"grad must have the shape"),
    (lambda: pp.Op("X", 0), r"kind must be 'F' \(forward\) or 'B'"),
    (lambda: pp.Op("F", -1), r"microbatch must be an integer >= 0"),
    (lambda: pp.stashed_peak(0), r"ops must be a list or tuple"),
    (lambda: pp.simulate_ops(0), r"orders must be a list or tuple"),
    (lambda: pp.simulate_schedule(4, 8, forward_s=math.inf), r"forward_s must be a finite number"),
    (lambda: planner.Plan(1, 1, 1, recompute=0), r"recompute must be True or False"),
    (lambda: planner.predict_megatron_runs(calibrate_on=-0.5), r"calibrate_on must be an integer"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_enumerate_plans_checks_its_option_lists():
    model = planner.ModelSpec(4, 256, 8, 128, 1000)
    cluster = planner.ClusterSpec(8, 8, 80e9, 1e15, 4.5e11, 5e10)
    with pytest.raises(TypeError, match=r"micro_batches must be a list or tuple or range"):
        planner.enumerate_plans(model, cluster, 64, micro_batches=0)
    assert planner.enumerate_plans(model, cluster, 64)
