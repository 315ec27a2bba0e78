"""Does the cache model give the textbook miss rates, by formula and by simulation?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import cache_model


@pytest.mark.parametrize(("order", "expected"), [("ijk", 1.125), ("jik", 1.125), ("ikj", 0.25), ("kij", 0.25),
                                                 ("jki", 2.0), ("kji", 2.0)])
def test_csapp_misses_per_iteration(order, expected):
    """CS:APP 3e fig. 6.46 (32-byte lines, 4 doubles: 1.25/0.5/2.0) rescaled to 8 doubles per line."""
    assert cache_model.misses_per_iteration(order, 8)["total"] == pytest.approx(expected)
    assert cache_model.misses_per_iteration(order, 4)["total"] == pytest.approx({1.125: 1.25, 0.25: 0.5,
                                                                               2.0: 2.0}[expected])


@pytest.mark.parametrize("order", ["ijk", "ikj", "jki"])
def test_simulation_matches_formula_when_a_row_does_not_fit(order):
    """With a cache smaller than one row (8 lines, n=64), the simulation gives the textbook rate."""
    n = 64
    simulated = cache_model.simulate_matmul_misses(n, order, cache_bytes=512, line_bytes=64, ways=8)
    formula = cache_model.misses_per_iteration(order, 8)["total"]
    assert simulated["total"] / n**3 == pytest.approx(formula, rel=0.02)


def test_simulation_counts_compulsory_misses_in_a_big_cache():
    """When everything fits, each line misses exactly once: 3 n² / (elements per line)."""
    n = 16
    for order in ("ijk", "kji"):
        misses = cache_model.simulate_matmul_misses(n, order, tile=4, cache_bytes=1 << 20)
        assert misses["total"] == 3 * n * n // 8


def test_tiling_cuts_simulated_misses():
    """Does tiling ijk (which misses on B every step) cut its L1 misses several-fold?"""
    untiled = cache_model.simulate_matmul_misses(96, "ijk", cache_bytes=32 * 1024)["total"]
    tiled = cache_model.simulate_matmul_misses(96, "ijk", tile=16, cache_bytes=32 * 1024)["total"]
    assert tiled * 4 < untiled
    assert cache_model.tile_fits(32, 32 * 1024) and not cache_model.tile_fits(64, 32 * 1024)


def test_miss_curves_are_the_simulation_per_iteration():
    """One curve per blocked order, one point per tile; a tile >= n is the untiled loop."""
    curves = cache_model.miss_curves(32)
    assert list(curves) == ["ijk", "ikj", "jki"] and curves["ijk"].shape == (len(cache_model.TILES),)
    untiled = cache_model.simulate_matmul_misses(32, "jki", 32, 32 * 1024, 64, 8)["total"] / 32**3
    assert curves["jki"][-1] == untiled  # tile 128 > n = 32
    np.testing.assert_array_equal(cache_model.miss_curves(32)["ikj"], curves["ikj"])


def test_matmul_trace_order_and_layout():
    """Is the trace A[i,k], B[k,j], C[i,j] per iteration, in the loop order, with A, B, C one after another?"""
    trace = cache_model.matmul_trace(2, "ijk", element_bytes=8)
    assert trace[:6].tolist() == [0, 32, 64, 8, 48, 64]  # (i,j,k) = (0,0,0) then (0,0,1)
    assert trace.size == 3 * 2**3 and trace.dtype == np.int64
    n = 5
    kij = cache_model.matmul_trace(n, "kij", element_bytes=4).reshape(-1, 3) // 4
    assert kij[1].tolist() == [0, n * n + 1, 2 * n * n + 1]  # j moves first: B[0,1], C[0,1]; A[0,0] stays


@pytest.mark.parametrize(("order", "tile"), [("ijk", None), ("jki", 3), ("kji", 4), ("ikj", 7)])
def test_matmul_trace_visits_every_iteration_once_in_tiles(order, tile):
    """Does the tiled trace visit each (i, j, k) once, finishing each tile of the loops before the next?"""
    n = 7
    elements = cache_model.matmul_trace(n, order, tile, element_bytes=1).reshape(-1, 3)
    i, k = np.divmod(elements[:, 0], n)
    j = elements[:, 1] - n * n - k * n
    assert len({(a, b, c) for a, b, c in zip(i.tolist(), j.tolist(), k.tolist(), strict=True)}) == n**3
    loops = {"i": i, "j": j, "k": k}
    outer = loops[order[0]] // (tile or n)
    assert np.all(np.diff(outer) >= 0)  # the outermost tile loop never goes back


@pytest.mark.parametrize(("n", "order", "tile", "cache_bytes", "ways"), [
    (8, "ijk", None, 512, 2), (12, "jki", 5, 1024, 4), (16, "kij", 4, 2048, 1), (10, "ikj", None, 640, 10)])
def test_trace_replayed_through_an_lru_cache_gives_the_simulators_misses(n, order, tile, cache_bytes, ways):
    """The exercise's reference LRU cache on matmul_trace agrees with the lesson's numba simulator."""
    from mlsys_lab.exercises.loops import reference_lru_misses

    expected = cache_model.simulate_matmul_misses(n, order, tile, cache_bytes, 64, ways)["total"]
    trace = cache_model.matmul_trace(n, order, tile)
    assert reference_lru_misses(trace, 64, cache_bytes // (64 * ways), ways) == expected
