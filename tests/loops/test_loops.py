"""Loop transformations: are the legality rules, the cache model and every kernel right?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import cache_model, dependence, matmul, single, wavefront


def test_dependence_textbook_examples():
    """Do the legality rules agree with Allen & Kennedy's examples?"""
    # a[i][j] = a[i-1][j+1]: distance (1, -1). Interchange would make it (-1, 1): illegal.
    assert dependence.interchange_legal([(1, -1)], (0, 1))
    assert not dependence.interchange_legal([(1, -1)], (1, 0))
    assert not dependence.tiling_legal([(1, -1)])
    # Skewing the inner loop by 1 gives (1, 0): now interchange and tiling are legal.
    assert dependence.skew([(1, -1)], 1).tolist() == [[1, 0]]
    assert dependence.tiling_legal(dependence.skew([(1, -1)], 1))
    # matmul's only dependence is on k (the reduction): every order is legal, i and j are parallel.
    assert len(dependence.legal_orders([(0, 0, 1)])) == 6
    assert dependence.parallel_loops([(0, 0, 1)]) == [0, 1]


def test_wavefront_skew_makes_inner_loop_parallel():
    """After skewing j' = i + j and swapping loops, is the inner loop of the DP free of carried deps?"""
    vectors = [(1, 0), (0, 1), (1, 1)]
    assert dependence.parallel_loops(vectors) == []
    skewed = dependence.skew(vectors, 1)
    assert skewed.tolist() == [[1, 1], [0, 1], [1, 2]]
    swapped = dependence.permute(skewed, (1, 0))
    assert dependence.is_legal(swapped)
    assert dependence.parallel_loops(swapped) == [1]


def test_fusion_and_unroll_and_jam_rules():
    """Fusion may read only values already produced; unroll-and-jam is a local interchange."""
    assert dependence.fusion_legal(0, [0, -1])
    assert not dependence.fusion_legal(0, [1])
    assert dependence.unroll_and_jam_legal([(0, 1)])
    assert not dependence.unroll_and_jam_legal([(1, -1)])


def test_bad_vectors_give_named_errors():
    with pytest.raises(ValueError, match="order must be a permutation"):
        dependence.permute([(1, 0)], (0, 0))
    with pytest.raises(ValueError, match="factor"):
        dependence.skew([(1, 0)], -1)


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


@pytest.fixture(scope="module")
def matrices():
    rng = np.random.default_rng()
    a, b = rng.standard_normal((48, 40)), rng.standard_normal((40, 56))
    return a, b, a @ b


@pytest.mark.parametrize("kernel", [matmul.matmul_ijk, matmul.matmul_ikj, matmul.matmul_jki])
def test_loop_orders_match_numpy(kernel, matrices):
    a, b, expected = matrices
    np.testing.assert_allclose(kernel(a, b, np.empty_like(expected)), expected, rtol=1e-10, atol=1e-10)


def test_tiled_kernels_match_numpy_with_ragged_tiles(matrices):
    """Tile sizes that do not divide the shapes exercise the remainder (peeled) iterations."""
    a, b, expected = matrices
    out = np.empty_like(expected)
    np.testing.assert_allclose(matmul.matmul_tiled(a, b, out, 7, 9, 11), expected, atol=1e-10)
    np.testing.assert_allclose(matmul.matmul_ijk_unroll_jam(a, b, out), expected, atol=1e-10)
    np.testing.assert_allclose(matmul.matmul_ijk_unroll_jam(a[:, :7], b[:7, :6], np.empty((48, 6))),
                               a[:, :7] @ b[:7, :6], atol=1e-10)  # fewer columns than the unroll factor
    for order in ("ijk", "ikj", "jki"):
        np.testing.assert_allclose(matmul.matmul_blocked(a, b, out, order, 5), expected, atol=1e-10)


def test_microkernel_matches_numpy_and_rejects_ragged_shapes(matrices):
    a, b, expected = matrices
    np.testing.assert_allclose(matmul.matmul_microkernel(a, b, np.empty_like(expected), 4, 8), expected,
                               atol=1e-10)
    rng = np.random.default_rng()
    a2, b2 = rng.standard_normal((32, 40)), rng.standard_normal((40, 48))
    for slp in (True, False):  # both code generators compute the same product
        np.testing.assert_allclose(matmul.matmul_microkernel(a2, b2, np.empty((32, 48)), 8, 16, slp=slp), a2 @ b2,
                                   atol=1e-10)
    assert matmul.microkernel_source(2, 2).count("+= a") == 4
    with pytest.raises(ValueError, match="C-contiguous float64"):
        matmul.matmul_microkernel(a2, b2, np.empty((32, 48), dtype=np.float32), 8, 16)
    with pytest.raises(ValueError, match="multiple of mr"):
        matmul.matmul_microkernel(a[:47], b, np.empty((47, 56)), 4, 8)
    assert matmul.flop(2, 3, 4) == 48


def test_single_loop_kernels_match_numpy():
    rng = np.random.default_rng()
    x = rng.standard_normal(1001)
    for kernel in (single.sum_naive, single.sum_unrolled, single.sum_vectorized):
        assert kernel(x) == pytest.approx(x.sum(), rel=1e-12, abs=1e-12)
    expected = np.convolve(np.pad(x, 1, mode="edge"), np.ones(3) / 3, mode="valid")
    for kernel in (single.smooth_branchy, single.smooth_peeled):
        np.testing.assert_allclose(kernel(x, np.empty_like(x)), expected, rtol=1e-12, atol=1e-14)
    u = rng.standard_normal((20, 30))
    reference = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    for kernel in (single.jacobi_serial, single.jacobi_parallel):
        np.testing.assert_allclose(kernel(u, np.zeros_like(u))[1:-1, 1:-1], reference, rtol=1e-12)
    fused = single.affine_relu_fused(x, 2.0, 0.5, np.empty_like(x), np.empty_like(x))
    unfused = single.affine_relu_unfused(x, 2.0, 0.5, np.empty_like(x), np.empty_like(x))
    np.testing.assert_array_equal(fused, np.maximum(2.0 * x + 0.5, 0.0))
    np.testing.assert_array_equal(unfused, fused)


def test_vectorized_sum_uses_simd_and_naive_does_not():
    """Is the fastmath loop compiled to packed SIMD adds, and the strict one not?"""
    x = np.ones(64)
    single.sum_naive(x), single.sum_vectorized(x)
    assert sum(single.vector_instructions(single.sum_vectorized).values()) > 0
    assert sum(single.vector_instructions(single.sum_naive).values()) == 0


def test_wavefront_matches_serial_dp():
    """Does the skewed, blocked, parallel DP give exactly the serial answer, for ragged block sizes?"""
    cost = np.random.default_rng().random((37, 53))
    expected = wavefront.min_path_serial(cost)
    assert expected[0, 2] == pytest.approx(cost[0, :3].sum())
    for block in (1, 5, 64):
        np.testing.assert_array_equal(wavefront.min_path_wavefront(cost, block), expected)
    assert wavefront.wavefront_count(3, 2).tolist() == [1, 2, 2, 1]
