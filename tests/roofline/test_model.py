"""Do the roofline helpers give the hand-worked numbers, and does an operator land where the formula says?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.hardware import H200
from mlsys_lab.operators import elementwise_cost, matmul_cost, reshape_cost
from mlsys_lab.roofline import model


def test_attainable_flops_is_the_lower_roof():
    # H200 fp32: 67 TFLOP/s, 4.8 TB/s. At I = 1 FLOP/byte the bandwidth roof: 4.8 TFLOP/s.
    assert model.attainable_flops(1.0, 67e12, 4.8e12) == pytest.approx(4.8e12)
    assert model.attainable_flops(100.0, 67e12, 4.8e12) == pytest.approx(67e12)
    got = model.attainable_flops(np.array([0.25, 13.0, 20.0]), 67e12, 4.8e12)
    np.testing.assert_allclose(got, [1.2e12, 62.4e12, 67e12])


def test_ridge_point_of_the_h200():
    assert model.ridge_point(67e12, 4.8e12) == pytest.approx(13.9583, rel=1e-4)
    assert model.ridge_point(H200.peak("bf16"), H200.memory_bandwidth_bytes_per_s) == pytest.approx(
        206.146, rel=1e-4
    )
    ridge = model.ridge_point(H200.peak("fp32"), H200.memory_bandwidth_bytes_per_s)
    assert ridge == H200.ridge_point("fp32")


def test_hierarchical_roofline_takes_the_lowest_roof():
    got = model.hierarchical_attainable({"HBM": 10.0, "L2": 2.0}, 67e12, {"HBM": 4e12, "L2": 10e12})
    assert got == pytest.approx(20e12)
    with pytest.raises(ValueError, match="missing"):
        model.hierarchical_attainable({"shared": 1.0}, 67e12, {"HBM": 4e12})


def test_curve_and_bad_inputs():
    x, y = model.roofline_curve(67e12, 4.8e12, points=5)
    assert x.shape == y.shape == (5,) and y[-1] == 67e12
    with pytest.raises(ValueError, match="bandwidth must be a number"):
        model.attainable_flops(1.0, 67e12, 0)
    with pytest.raises(ValueError, match="intensity must be > 0"):
        model.attainable_flops([1.0, -1.0], 67e12, 1e12)


def test_place_matches_the_formula():
    """c = a + b over 2^20 fp32: I = 1/12, memory-bound, 12 bytes per element at 4.8 TB/s."""
    point = model.place(H200, elementwise_cost(1024 * 1024, n_inputs=2), "fp32")
    assert point.cost.intensity == pytest.approx(1 / 12)
    assert point.attainable_flops == pytest.approx(4.8e12 / 12)
    assert point.seconds == pytest.approx(12 * 1024 * 1024 / 4.8e12)
    assert point.bound == "memory-bound" and point.peak_flops == 67e12 and point.bandwidth == 4.8e12
    big = model.place(H200, matmul_cost(4096, 4096, 4096), "fp32")
    assert big.bound == "compute-bound" and big.seconds == pytest.approx(2 * 4096**3 / 67e12)
    view = model.place(H200, reshape_cost(16), "fp32")  # no FLOPs, no bytes: attains nothing
    assert view.attainable_flops == 0.0 and view.bound == "no work"


def test_operator_costs_of_the_explorer():
    """The linear layer is a (batch x d) @ (d x d) matmul; the sum reduces m x n elements to one."""
    assert model.operator_cost("linear layer (batch x d)", 64, 4096, 1, "bf16") == matmul_cost(
        64, 4096, 4096, "bf16"
    )
    add = model.operator_cost("elementwise add", 1000, 1, 1)
    assert add.flop == 1000 and add.n_bytes == 12_000
    assert model.operator_cost("sum", 10, 10, 1).flop == 99
    with pytest.raises(ValueError, match="operator must be one of"):
        model.operator_cost("conv", 1, 1, 1, "fp32")
