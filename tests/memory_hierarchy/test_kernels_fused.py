"""Does fused.cu compile, and do the fused softmax, SiLU chain and sum match their NumPy references?"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import fused

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")



def test_softmax_and_silu_references():
    x = np.random.default_rng().standard_normal((7, 12)).astype(np.float32) * 10
    y = fused.softmax_reference(x)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(np.argmax(y, axis=1) == np.argmax(x, axis=1))
    z = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    expected = [(-0.25) / (1 + math.exp(0.25)), 1.25 / (1 + math.exp(-1.25)), -3.25 / (1 + math.exp(3.25))]
    np.testing.assert_allclose(fused.silu_affine_reference(z), expected, rtol=1e-6)
    if not backend.on_gpu:  # the unfused chain runs on NumPy too
        np.testing.assert_allclose(fused.silu_affine_unfused(z), expected, rtol=1e-6)


@needs_gpu
def test_fused_kernels_match_numpy():
    xp = backend.xp
    g = np.random.default_rng()
    for rows, cols in ((64, 4096), (33, 1000), (5, 12)):
        x = (g.standard_normal((rows, cols)) * 4).astype(np.float32)
        got = backend.asnumpy(fused.softmax_rows(xp.asarray(x)))
        np.testing.assert_allclose(got, fused.softmax_reference(x), rtol=1e-5, atol=1e-7)
        out = xp.full((rows, cols), np.nan, dtype=np.float32)  # written in place, nothing left of the NaNs
        assert fused.softmax_rows(xp.asarray(x), out=out) is out
        np.testing.assert_allclose(backend.asnumpy(out), fused.softmax_reference(x), rtol=1e-5, atol=1e-7)
        for threads, blocks, streaming in ((128, 16, True), (1024, 2, False)):
            got = backend.asnumpy(fused.softmax_rows(xp.asarray(x), threads, min_blocks=blocks, streaming=streaming))
            np.testing.assert_allclose(got, fused.softmax_reference(x), rtol=1e-5, atol=1e-7)
        for threads, blocks_per_sm in ((256, 4), (128, 2)):  # fewer blocks than rows: each block loops
            big = np.repeat(x, 40, axis=0) + g.standard_normal((40 * rows, 1)).astype(np.float32)
            got = backend.asnumpy(fused.softmax_rows_persistent(xp.asarray(big), threads, blocks_per_sm))
            np.testing.assert_allclose(got, fused.softmax_reference(big), rtol=1e-5, atol=1e-7)
    x = g.standard_normal(1 << 16).astype(np.float32)
    np.testing.assert_allclose(
        backend.asnumpy(fused.silu_affine(xp.asarray(x))), fused.silu_affine_reference(x), rtol=1e-5, atol=1e-6
    )
    assert float(fused.sum_reduce(xp.asarray(x), blocks=64)) == pytest.approx(
        float(x.sum(dtype=np.float64)), rel=1e-4, abs=1e-2
    )
