"""Do the one-loop transformations keep the result, and does the fastmath sum vectorize?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import single


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
