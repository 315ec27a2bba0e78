"""Does littles_law.cu compile, and do the pointer chase, in-flight reads, FMA and MMA chains match NumPy?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.roofline import littles_law

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_source_compiles_for_sm90(tmp_path):
    path = str(loader.source_path("roofline/littles_law.cu"))
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-DCHAINS=4", "--ptx", path, "-odir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_chase_order_is_one_cycle():
    nxt = littles_law.chase_order(1000, seed=3)
    seen, j = set(), 0
    for _ in range(1000):
        seen.add(j)
        j = int(nxt[j])
    assert len(seen) == 1000 and j == 0
    assert littles_law.chase_reference(nxt, 1000) == 0
    with pytest.raises(ValueError, match="n_elements must be an integer"):
        littles_law.chase_order(1)


def test_ffma_reference_matches_a_scalar_loop():
    a = [np.float32(k) for k in range(3)]
    for _ in range(50):
        a = [np.float32(v * np.float32(0.999) + np.float32(0.001)) for v in a]
    assert littles_law.ffma_reference(3, 50) == pytest.approx(float(np.sum(a, dtype=np.float32)), rel=1e-6)


@needs_gpu
def test_littles_law_kernels_match_numpy():
    xp = backend.xp
    nxt = littles_law.chase_order(4096, seed=1)
    final, cycles = littles_law.pointer_chase(xp.asarray(nxt), 500, start=17)
    assert final == littles_law.chase_reference(nxt, 500, start=17) and cycles > 0
    x = xp.asarray(np.random.default_rng().standard_normal(4 * 32 * 256 * 4, dtype=np.float32))
    got = littles_law.read_inflight(x, blocks=32, threads=256, chains=4)
    assert float(got.sum(dtype=xp.float64)) == pytest.approx(float(x.sum(dtype=xp.float64)), rel=1e-4, abs=1e-2)
    out, _ = littles_law.ffma_chains(4, 64, 4, 100)
    np.testing.assert_allclose(backend.asnumpy(out), littles_law.ffma_reference(4, 100), rtol=1e-5)
    out, _ = littles_law.mma_chains(2, 2, 3, 10)
    assert bool((out == 12.0).all())
