"""Does local.cu spill when its registers are capped, as ptxas reports and as the reference computes?"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import local_memory

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

PTXAS_SAMPLE = """ptxas info    : Compiling entry function 'register_pressure' for 'sm_90'
ptxas info    : Function properties for register_pressure
    224 bytes stack frame, 376 bytes spill stores, 372 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 224 bytes cumulative stack size
ptxas info    : Compiling entry function 'tiled' for 'sm_90'
ptxas info    : Function properties for tiled
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 4224 bytes smem
"""


def test_parse_ptxas_reads_registers_and_spills():
    usage = {u.kernel: u for u in local_memory.parse_ptxas(PTXAS_SAMPLE)}
    assert usage["register_pressure"].registers == 40 and usage["register_pressure"].stack_frame_bytes == 224
    assert (
        usage["register_pressure"].spill_store_bytes == 376
        and usage["register_pressure"].spill_load_bytes == 372
    )
    assert usage["tiled"].shared_bytes == 4224 and usage["tiled"].spill_store_bytes == 0


@needs_nvcc
def test_capping_registers_makes_ptxas_spill():
    free = local_memory.ptxas_usage("memory_hierarchy/local.cu", {"N_LIVE": 64})[0]
    capped = local_memory.ptxas_usage("memory_hierarchy/local.cu", {"N_LIVE": 64}, max_registers=32)[0]
    assert free.spill_store_bytes == 0 and free.registers > 64
    assert capped.registers <= 32 and capped.spill_store_bytes > 0


@needs_nvcc
def test_softmax_launch_bound_promise_spills_only_where_the_lesson_says():
    """Lesson 04's softmax sweep: 128 threads x 8 float4 need ~48 registers; promising 16 blocks per SM
    caps them at 32 and ptxas spills. 256 threads x 4 float4 fit 8 blocks without the promise."""
    def usage(threads, vec, min_blocks):
        reports = local_memory.ptxas_usage("memory_hierarchy/fused.cu", {
            "SOFTMAX_THREADS": threads, "SOFTMAX_VEC": vec, "SOFTMAX_MIN_BLOCKS": min_blocks})
        return next(u for u in reports if u.kernel == "softmax_rows")

    free, promised = usage(128, 8, 1), usage(128, 8, 16)
    assert free.spill_store_bytes == 0 and free.registers > 32
    assert promised.registers <= 32 and promised.spill_store_bytes > 0
    relaxed = usage(256, 4, 1)
    assert relaxed.spill_store_bytes == 0 and relaxed.registers * 256 * 8 <= 65536


def test_register_pressure_reference_matches_a_scalar_loop():
    x = np.random.default_rng().uniform(-1, 1, 5).astype(np.float32)
    n_live, iters = 6, 4
    for value, got in zip(x, local_memory.register_pressure_reference(x, n_live, iters), strict=True):
        r = [np.float32(value * (j + 1)) for j in range(n_live)]
        for _ in range(iters):
            for j in range(n_live):
                r[j] = np.float32(0.5) * r[j] + np.float32(0.5) * r[(j + 1) % n_live]
        assert got == pytest.approx(float(np.sum(r, dtype=np.float32)), rel=1e-6)


def test_launchers_validate_arguments():
    with pytest.raises(ValueError, match="max_registers must be an integer between 16 and 255"):
        local_memory.ptxas_usage("memory_hierarchy/local.cu", max_registers=8)


@needs_gpu
def test_register_pressure_matches_numpy_capped_or_not():
    xp = backend.xp
    x = np.random.default_rng().uniform(-1, 1, 5000).astype(np.float32)
    for cap in (None, 32):
        got = local_memory.register_pressure(xp.asarray(x), 64, 16, cap)
        np.testing.assert_allclose(backend.asnumpy(got), local_memory.register_pressure_reference(x, 64, 16), rtol=1e-5)
    assert local_memory.register_pressure_kernel(64, 32).local_size_bytes > 0
