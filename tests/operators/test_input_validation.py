"""Do operator costs and graph helpers reject bad arguments by name (issue #19)?"""

import numpy as np
import pytest

from mlsys_lab.hardware import H200
from mlsys_lab.operators import cost
from mlsys_lab.operators.plain import to_plain
from mlsys_lab.operators.random_graphs import random_graph, random_inputs


@pytest.mark.parametrize("call, text", [
    (lambda: cost.OpCost("x", "elementwise", -1.0, 8.0), r"flop must be a number >= 0"),
    (lambda: cost.OpCost("x", "nonsense", 1.0, 8.0), r"op_class must be one of"),
    (lambda: cost.attention_cost(1, 1, 128, 64, fused=0), r"fused must be True or False"),
    (lambda: cost.reshape_cost(16, dtype=0), r"dtype"),
    (lambda: cost.concat_cost(-1), r"sizes must be a list or tuple"),
    (lambda: cost.conv2d_cost(1, 3, 8, 0, 32), r"height must be an integer >= 1"),
    (lambda: cost.bound(0, H200), r"cost must be a OpCost"),
    (lambda: cost.time_lower_bound_seconds(cost.matmul_cost(8, 8, 8), 0), r"hardware must be a Hardware"),
    (lambda: to_plain(0), r"graph must be a Graph"),
    (lambda: random_graph(0, 5), r"g must be a Generator"),
    (lambda: random_graph(np.random.default_rng(0), 10**30), r"n_ops must be an integer between 1 and 10000"),
    (lambda: random_inputs(np.random.default_rng(0), 0), r"graph must be a Graph"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_a_view_still_costs_nothing():
    assert cost.reshape_cost(16).n_bytes == 0.0
