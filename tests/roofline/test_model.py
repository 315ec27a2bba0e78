"""Do the roofline and Little's-law helpers give the hand-worked numbers?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.hardware import H200
from mlsys_lab.roofline import model as roofline


def test_attainable_flops_is_the_lower_roof():
    # H200 fp32: 67 TFLOP/s, 4.8 TB/s. At I = 1 FLOP/byte the bandwidth roof: 4.8 TFLOP/s.
    assert roofline.attainable_flops(1.0, 67e12, 4.8e12) == pytest.approx(4.8e12)
    assert roofline.attainable_flops(100.0, 67e12, 4.8e12) == pytest.approx(67e12)
    got = roofline.attainable_flops(np.array([0.25, 13.0, 20.0]), 67e12, 4.8e12)
    np.testing.assert_allclose(got, [1.2e12, 62.4e12, 67e12])


def test_ridge_point_of_the_h200():
    assert roofline.ridge_point(67e12, 4.8e12) == pytest.approx(13.9583, rel=1e-4)
    assert roofline.ridge_point(H200.peak("bf16"), H200.memory_bandwidth_bytes_per_s) == pytest.approx(
        206.146, rel=1e-4
    )
    ridge = roofline.ridge_point(H200.peak("fp32"), H200.memory_bandwidth_bytes_per_s)
    assert ridge == H200.ridge_point("fp32")


def test_bound_and_attainable_seconds():
    assert roofline.bound(1.0, 67e12, 4.8e12) == "memory"
    assert roofline.bound(14.0, 67e12, 4.8e12) == "compute"
    cost = roofline.Cost(flop=1e12, n_bytes=1e9)
    assert roofline.attainable_seconds(cost, 1e15, 1e12) == pytest.approx(1e-3)  # bytes dominate
    assert roofline.attainable_seconds(cost, 1e14, 1e13) == pytest.approx(1e-2)  # FLOPs dominate


def test_operator_costs_by_hand():
    cost = roofline.matmul_cost(4096, 4096, 4096)
    assert cost.flop == 2 * 4096**3 == 137_438_953_472
    assert cost.n_bytes == 4 * 3 * 4096**2
    assert cost.intensity == pytest.approx(4096 / 6)
    vec = roofline.matmul_cost(1, 4096, 4096, "bf16")  # a matrix-vector product: ~1 FLOP/byte
    assert vec.intensity == pytest.approx(2 * 4096 * 4096 / (2 * (4096 + 4096 * 4096 + 4096)))
    add = roofline.elementwise_cost(1000, 1.0, n_inputs=2, n_outputs=1)
    assert add.intensity == pytest.approx(1 / 12)  # c = a + b in fp32
    soft = roofline.softmax_cost(16384, 4096)
    assert soft.n_bytes == 2 * 4 * 16384 * 4096 and soft.flop == 5 * 16384 * 4096
    assert roofline.reduction_cost(100).intensity == pytest.approx(0.25)


def test_tiling_raises_matmul_intensity():
    m = n = k = 1024
    untiled = roofline.matmul_tile_traffic(m, n, k, 1, 1)
    assert untiled == 4 * (2 * m * n * k + m * n)
    tiled = roofline.matmul_tile_traffic(m, n, k, 128, 128)
    assert tiled == pytest.approx(4 * (m * k * 8 + k * n * 8 + m * n))
    assert untiled / tiled > 100


def test_hierarchical_roofline_takes_the_lowest_roof():
    got = roofline.hierarchical_attainable({"HBM": 10.0, "L2": 2.0}, 67e12, {"HBM": 4e12, "L2": 10e12})
    assert got == pytest.approx(20e12)
    with pytest.raises(ValueError, match="missing"):
        roofline.hierarchical_attainable({"shared": 1.0}, 67e12, {"HBM": 4e12})


def test_littles_law_worked_examples():
    # 4.8 TB/s at 600 ns of latency: 2.88 MB must be in flight, about 21.8 KB per SM of 132.
    assert roofline.inflight_required(4.8e12, 600e-9) == pytest.approx(2.88e6)
    # 128 FP32 FMA lanes per SM per cycle, 4 cycles of latency: 512 FMAs in flight (16 warps x 1 chain).
    assert roofline.inflight_required(128, 4) == 512
    np.testing.assert_allclose(
        roofline.throughput_with_inflight([1e5, 1e6, 1e7], 1e-6, 4.8e12), [1e11, 1e12, 4.8e12]
    )


def test_curve_and_bad_inputs():
    x, y = roofline.roofline_curve(67e12, 4.8e12, points=5)
    assert x.shape == y.shape == (5,) and y[-1] == 67e12
    with pytest.raises(ValueError, match="bandwidth must be a number"):
        roofline.attainable_flops(1.0, 67e12, 0)
    with pytest.raises(ValueError, match="intensity must be > 0"):
        roofline.attainable_flops([1.0, -1.0], 67e12, 1e12)
    with pytest.raises(ValueError, match="dtype must be one of"):
        roofline.matmul_cost(2, 2, 2, "fp12")
    with pytest.raises(ValueError, match="m must be an integer >= 1"):
        roofline.matmul_cost(0, 2, 2)
