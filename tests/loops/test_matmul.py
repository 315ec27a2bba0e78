"""Does every matmul kernel (interchanged, tiled, unrolled-and-jammed, micro-kernel) compute A @ B?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import matmul


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
    # Both code generators compute the same product. (The lesson times an 8 x 16 kernel: the same generated
    # source with more accumulators; 4 x 8 here keeps numba's compile of 128 accumulators out of the suite.)
    for slp in (True, False):
        np.testing.assert_allclose(matmul.matmul_microkernel(a2, b2, np.empty((32, 48)), 4, 8, slp=slp), a2 @ b2,
                                   atol=1e-10)
    assert matmul.microkernel_source(2, 2).count("+= a") == 4
    with pytest.raises(ValueError, match="C-contiguous float64"):
        matmul.matmul_microkernel(a2, b2, np.empty((32, 48), dtype=np.float32), 4, 8)
    with pytest.raises(ValueError, match="multiple of mr"):
        matmul.matmul_microkernel(a[:47], b, np.empty((47, 56)), 4, 8)
