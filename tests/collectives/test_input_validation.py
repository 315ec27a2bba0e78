"""Do the cost models reject meaningless sizes and link figures with the parameter's name (issue #19)?"""

import math

import numpy as np
import pytest

from mlsys_lab.collectives import cost, topology


@pytest.mark.parametrize("call, text", [
    (lambda: cost.allreduce_time("ring", "ab", 8, 1e-6, 1e-9), r"n_bytes must be an array of numbers"),
    (lambda: cost.allreduce_time("ring", 1e6, 8, math.inf, 1e-9), r"alpha must be a finite number"),
    (lambda: cost.algorithm_bandwidth(1e6, "ab"), r"seconds must be an array of numbers"),
    (lambda: cost.algorithm_bandwidth(1e6, 0.0), r"seconds must be > 0"),
    (lambda: cost.crossover_bytes(0, "tree", 8, 1e-6, 1e-9), r"algorithm_a must be one of"),
    (lambda: cost.flat_ring_allreduce_time(1e6, 2, 8, -1.0, 1e-9), r"alpha_inter must be"),
    (lambda: cost.hierarchical_alltoall_time(1e6, 2, 8, math.nan, 1e-9, 1e-6, 1e-9), r"alpha_intra must be"),
    (lambda: topology.bisection_bandwidth("ring", 8, math.inf), r"link_bandwidth must be a finite number"),
    (lambda: topology.build(np.empty(0), 8), r"topology must be one of"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_array_sizes_still_give_arrays():
    sizes = np.array([1e3, 1e6])
    np.testing.assert_allclose(cost.allreduce_time("ring", sizes, 8, 1e-6, 1e-9),
                               [cost.allreduce_time("ring", s, 8, 1e-6, 1e-9) for s in sizes])
