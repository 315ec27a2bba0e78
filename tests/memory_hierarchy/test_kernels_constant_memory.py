"""Does constant.cu compile, and does the polynomial match its NumPy reference from either memory?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import constant_memory

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")



def test_poly_reference_with_a_broadcast_is_horner():
    g = np.random.default_rng()
    x = g.uniform(-1, 1, 300).astype(np.float32)
    c = g.uniform(-1, 1, constant_memory.N_COEFFS).astype(np.float32)
    np.testing.assert_allclose(
        constant_memory.poly_reference(x, c, 0), np.polyval(c.astype(np.float64), x), rtol=1e-4, atol=1e-5
    )
    lane5 = constant_memory.poly_reference(x, c, 1)[5]  # lane 5 starts at coefficient 5
    assert lane5 == pytest.approx(np.polyval(np.roll(c, -5).astype(np.float64), x[5]), rel=1e-4, abs=1e-5)


@needs_gpu
def test_poly_matches_numpy_from_constant_and_global_memory():
    xp = backend.xp
    g = np.random.default_rng()
    x = g.uniform(-1, 1, 5000).astype(np.float32)
    c = (g.uniform(-1, 1, constant_memory.N_COEFFS) / 2).astype(np.float32)
    for space in ("constant", "global"):
        for spread in (0, 1):
            got = constant_memory.poly(xp.asarray(x), xp.asarray(c), spread, space)
            np.testing.assert_allclose(
                backend.asnumpy(got), constant_memory.poly_reference(x, c, spread), rtol=1e-4, atol=1e-5
            )
