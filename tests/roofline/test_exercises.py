"""The lesson 03 references against hand-worked values (the catalogue proves the checks)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from mlsys_lab.exercises import roofline as ex


def test_hierarchical_bound_by_hand():
    # 4096^3 fp32 in 16 x 16 tiles: L2 moves 4 (2 * 4096^3 / 16 + 4096^2) = 34.43 GB -> 3.992 FLOP/B x 12 TB/s
    flop = 2 * 4096.0**3
    traffic = {"HBM": 12 * 4096.0**2, "L2": 4 * (2 * 4096.0**3 / 16 + 4096.0**2)}
    attainable, limiter = ex.reference_bound(flop, traffic, 67e12, {"HBM": 4.8e12, "L2": 12e12})
    assert limiter == "L2" and attainable == pytest.approx(47.906e12, rel=1e-4)
    # exactly on the ridge (16 FLOP/B x 2^40 B/s = 2^44 FLOP/s) counts as compute-bound
    assert ex.reference_bound(2.0**30, {"HBM": 2.0**26}, 2.0**44, {"HBM": 2.0**40}) == (2.0**44, "compute")


def test_compute_bound_batch_by_hand():
    # d = 8192, bf16, ridge 206.15: b >= 206.15 * 2 * 8192 / (2 * (8192 - 412.3)) = 217.1 -> 218
    assert ex.reference_compute_bound_batch(8192, 989.5e12, 4.8e12, 2) == 218
    assert ex.reference_compute_bound_batch(128, 989.5e12, 4.8e12, 2) is None
    # on the ridge: 2 * 2048 * 4096 / (2 + 4096 / 2048) / 2 ... = 1024 FLOP/B exactly at b = 2048
    assert ex.reference_compute_bound_batch(4096, 1024e12, 1e12, 2) == 2048


def test_loads_in_flight_by_hand():
    # three points; 90% of 4e12 = 3.6e12 is first reached at 4 MB in flight (3.8e12 B/s): t = 4e6 / 3.8e12
    inflight, rate = [8e6, 1e6, 4e6], [4e12, 1.5e12, 3.8e12]
    latency, loads = ex.reference_loads_in_flight(inflight, rate, 0.9, 100, 1000, 8)
    assert latency == pytest.approx(4e6 / 3.8e12)
    # 3.6e12 x 1.0526e-6 s = 3.789 MB over 1e5 threads of 8 B: 4.74 -> 5
    assert loads == 5


def test_kernel_counts_by_hand():
    assert ex.kernel_counts("axpy", 1000) == (2000.0, 12000.0)
    assert ex.kernel_counts("sum", 1000) == (999.0, 4004.0)
    assert ex.kernel_counts("matmul", 10) == (2000.0, 1200.0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ex.kernel_counts("conv", 10)


def test_a_learner_who_has_not_started_is_told_so():
    def todo(*args):
        raise NotImplementedError()

    for check in (ex.check_classify_bound, ex.check_compute_bound_batch, ex.check_loads_in_flight,
                  ex.check_measure_on_roofline):
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            check(todo)
        assert "not attempted yet" in buffer.getvalue()


def test_tile_traffic_by_hand():
    # 4 x 4 x 4 in 2 x 2 x 2 tiles, fp32: 4 blocks x 2 steps x (4 + 4) elements x 4 B = 256 B loaded, C 64 B
    assert ex.reference_tile_traffic(4, 4, 4, 2, 2, 2, 2**20, 4) == {"HBM": 3 * 64, "L2": 256 + 64}
    assert ex.reference_tile_traffic(4, 4, 4, 2, 2, 2, 0, 4) == {"HBM": 320, "L2": 320}
    # partial edge tiles: 3 x 1 x 3 in 2 x 2 x 2 tiles is 2 blocks; block 0 loads A 2x2 + 2x1, B 2x1 + 1x1
    assert ex.reference_tile_traffic(3, 1, 3, 2, 2, 2, 0, 1)["L2"] == (4 + 2 + 2 + 1) + (2 + 1 + 2 + 1) + 3


def test_tile_traffic_l2_too_small_for_b_rereads_it_per_row_of_blocks():
    """With an L2 that keeps the A strip but not B, HBM reads A once and B once per row of blocks."""
    n, tile, e = 64, 16, 4
    traffic = ex.reference_tile_traffic(n, n, n, tile, tile, tile, 3 * tile * n * e, e)
    assert traffic["HBM"] == n * n * e + (n // tile) * n * n * e + n * n * e
    huge = ex.reference_tile_traffic(n, n, n, tile, tile, tile, 2**30, e)
    assert huge["HBM"] == 3 * n * n * e and huge["L2"] == traffic["L2"]
