"""Do the memory-hierarchy kernels compile, and agree with their NumPy references?"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import spaces as memory
from mlsys_lab.kernels.roofline import littles_law

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SOURCES = [
    "memory_hierarchy/global.cu",
    "memory_hierarchy/shared.cu",
    "memory_hierarchy/constant.cu",
    "memory_hierarchy/local.cu",
    "memory_hierarchy/fused.cu",
    "roofline/littles_law.cu",
]

PTXAS_SAMPLE = """ptxas info    : Compiling entry function 'register_pressure' for 'sm_90'
ptxas info    : Function properties for register_pressure
    224 bytes stack frame, 376 bytes spill stores, 372 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 224 bytes cumulative stack size
ptxas info    : Compiling entry function 'tiled' for 'sm_90'
ptxas info    : Function properties for tiled
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 4224 bytes smem
"""


@needs_nvcc
def test_sources_compile_for_sm90(tmp_path):
    """Does every memory-lesson .cu file compile with nvcc for sm_90 (one PTX file each)?"""
    paths = [str(loader.source_path(source)) for source in SOURCES]
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-std=c++17", "-DCHAINS=4", "--ptx", *paths, "-odir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stems = sorted(Path(source).stem for source in SOURCES)
    assert sorted(p.stem for p in tmp_path.glob("*.ptx")) == stems


def test_loader_rejects_unknown_files_and_formats_defines():
    with pytest.raises(ValueError, match="file_name must be one of the kernel sources"):
        loader.source_path("nope.cu")
    assert loader.define_options({"TN": 4, "BM": 128}) == ("-DBM=128", "-DTN=4")
    assert loader.blocks_for(1000, 256) == 4 and loader.blocks_for(1024, 256) == 4


def test_parse_ptxas_reads_registers_and_spills():
    usage = {u.kernel: u for u in memory.parse_ptxas(PTXAS_SAMPLE)}
    assert usage["register_pressure"].registers == 40
    assert (
        usage["register_pressure"].spill_store_bytes == 376
        and usage["register_pressure"].spill_load_bytes == 372
    )
    assert usage["tiled"].shared_bytes == 4224 and usage["tiled"].spill_store_bytes == 0


@needs_nvcc
def test_capping_registers_makes_ptxas_spill():
    free = memory.ptxas_usage("memory_hierarchy/local.cu", {"N_LIVE": 64})[0]
    capped = memory.ptxas_usage("memory_hierarchy/local.cu", {"N_LIVE": 64}, max_registers=32)[0]
    assert free.spill_store_bytes == 0 and free.registers > 64
    assert capped.registers <= 32 and capped.spill_store_bytes > 0


@needs_nvcc
def test_softmax_launch_bound_promise_spills_only_where_the_lesson_says():
    """Lesson 04's softmax sweep: 128 threads x 8 float4 need ~48 registers; promising 16 blocks per SM
    caps them at 32 and ptxas spills. 256 threads x 4 float4 fit 8 blocks without the promise."""
    def usage(threads, vec, min_blocks):
        reports = memory.ptxas_usage("memory_hierarchy/fused.cu", {"SOFTMAX_THREADS": threads, "SOFTMAX_VEC": vec,
                                                        "SOFTMAX_MIN_BLOCKS": min_blocks})
        return next(u for u in reports if u.kernel == "softmax_rows")

    free, promised = usage(128, 8, 1), usage(128, 8, 16)
    assert free.spill_store_bytes == 0 and free.registers > 32
    assert promised.registers <= 32 and promised.spill_store_bytes > 0
    relaxed = usage(256, 4, 1)
    assert relaxed.spill_store_bytes == 0 and relaxed.registers * 256 * 8 <= 65536


def test_register_pressure_reference_matches_a_scalar_loop():
    x = np.random.default_rng().uniform(-1, 1, 5).astype(np.float32)
    n_live, iters = 6, 4
    for value, got in zip(x, memory.register_pressure_reference(x, n_live, iters), strict=True):
        r = [np.float32(value * (j + 1)) for j in range(n_live)]
        for _ in range(iters):
            for j in range(n_live):
                r[j] = np.float32(0.5) * r[j] + np.float32(0.5) * r[(j + 1) % n_live]
        assert got == pytest.approx(float(np.sum(r, dtype=np.float32)), rel=1e-6)


def test_poly_reference_with_a_broadcast_is_horner():
    g = np.random.default_rng()
    x, c = g.uniform(-1, 1, 300).astype(np.float32), g.uniform(-1, 1, memory.N_COEFFS).astype(np.float32)
    np.testing.assert_allclose(
        memory.poly_reference(x, c, 0), np.polyval(c.astype(np.float64), x), rtol=1e-4, atol=1e-5
    )
    lane5 = memory.poly_reference(x, c, 1)[5]  # lane 5 starts at coefficient 5
    assert lane5 == pytest.approx(np.polyval(np.roll(c, -5).astype(np.float64), x[5]), rel=1e-4, abs=1e-5)


def test_softmax_and_silu_references():
    x = np.random.default_rng().standard_normal((7, 12)).astype(np.float32) * 10
    y = memory.softmax_reference(x)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(np.argmax(y, axis=1) == np.argmax(x, axis=1))
    z = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    expected = [(-0.25) / (1 + math.exp(0.25)), 1.25 / (1 + math.exp(-1.25)), -3.25 / (1 + math.exp(3.25))]
    np.testing.assert_allclose(memory.silu_affine_reference(z), expected, rtol=1e-6)
    if not backend.on_gpu:  # the unfused chain runs on NumPy too
        np.testing.assert_allclose(memory.silu_affine_unfused(z), expected, rtol=1e-6)


def test_shared_stride_reference():
    ref = memory.shared_stride_reference(stride=3, iters=10, n_threads=64)
    assert ref[0] == 0 and ref[1] == 30 and ref[33] == 30 and ref[31] == 930


def test_chase_order_is_one_cycle():
    nxt = littles_law.chase_order(1000, seed=3)
    seen, j = set(), 0
    for _ in range(1000):
        seen.add(j)
        j = int(nxt[j])
    assert len(seen) == 1000 and j == 0
    assert littles_law.chase_reference(nxt, 1000) == 0


def test_ffma_reference_matches_a_scalar_loop():
    a = [np.float32(k) for k in range(3)]
    for _ in range(50):
        a = [np.float32(v * np.float32(0.999) + np.float32(0.001)) for v in a]
    assert littles_law.ffma_reference(3, 50) == pytest.approx(float(np.sum(a, dtype=np.float32)), rel=1e-6)


def test_launchers_validate_arguments():
    with pytest.raises(ValueError, match="max_registers must be an integer between 16 and 255"):
        memory.ptxas_usage("memory_hierarchy/local.cu", max_registers=8)
    with pytest.raises(ValueError, match="n_elements must be an integer"):
        littles_law.chase_order(1)


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_launcher_without_gpu_says_why():
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        memory.copy(np.ones(16, np.float32))


# ----------------------------------------------------------------------------------- on the GPU
@needs_gpu
def test_global_kernels_match_numpy():
    xp = backend.xp
    x = xp.asarray(np.random.default_rng().standard_normal(4096 * 8, dtype=np.float32))
    assert bool((memory.copy(x) == x).all())
    for stride in (1, 3, 8):
        assert bool((memory.read_strided(x, 1000, stride) == x[::stride][:1000]).all())
    total = float(memory.read_passes(x, 3, blocks=16).sum(dtype=xp.float64))
    assert total == pytest.approx(3 * float(x.sum(dtype=xp.float64)), rel=1e-4)


@needs_gpu
def test_shared_kernels_match_numpy():
    xp = backend.xp
    x = xp.asarray(np.random.default_rng().standard_normal((300, 517), dtype=np.float32))
    for variant in memory.TRANSPOSE_KERNELS:
        assert bool((memory.transpose(x, variant) == x.T).all())
    for stride in (1, 2, 7, 32):
        got = backend.asnumpy(memory.shared_stride(stride, 64, blocks=4, threads=128))
        np.testing.assert_array_equal(got, memory.shared_stride_reference(stride, 64, 512))


@needs_gpu
def test_constant_and_local_kernels_match_numpy():
    xp = backend.xp
    g = np.random.default_rng()
    x, c = (
        g.uniform(-1, 1, 5000).astype(np.float32),
        (g.uniform(-1, 1, memory.N_COEFFS) / 2).astype(np.float32),
    )
    for space in ("constant", "global"):
        for spread in (0, 1):
            got = memory.poly(xp.asarray(x), xp.asarray(c), spread, space)
            np.testing.assert_allclose(
                backend.asnumpy(got), memory.poly_reference(x, c, spread), rtol=1e-4, atol=1e-5
            )
    for cap in (None, 32):
        got = memory.register_pressure(xp.asarray(x), 64, 16, cap)
        np.testing.assert_allclose(
            backend.asnumpy(got), memory.register_pressure_reference(x, 64, 16), rtol=1e-5
        )
    assert memory.register_pressure_kernel(64, 32).local_size_bytes > 0


@needs_gpu
def test_fused_kernels_match_numpy():
    xp = backend.xp
    g = np.random.default_rng()
    for rows, cols in ((64, 4096), (33, 1000), (5, 12)):
        x = (g.standard_normal((rows, cols)) * 4).astype(np.float32)
        got = backend.asnumpy(memory.softmax_rows(xp.asarray(x)))
        np.testing.assert_allclose(got, memory.softmax_reference(x), rtol=1e-5, atol=1e-7)
        for threads, blocks, streaming in ((128, 16, True), (1024, 2, False)):
            got = backend.asnumpy(memory.softmax_rows(xp.asarray(x), threads, min_blocks=blocks, streaming=streaming))
            np.testing.assert_allclose(got, memory.softmax_reference(x), rtol=1e-5, atol=1e-7)
        for threads, blocks_per_sm in ((256, 4), (128, 2)):  # fewer blocks than rows: each block loops
            big = np.repeat(x, 40, axis=0) + g.standard_normal((40 * rows, 1)).astype(np.float32)
            got = backend.asnumpy(memory.softmax_rows_persistent(xp.asarray(big), threads, blocks_per_sm))
            np.testing.assert_allclose(got, memory.softmax_reference(big), rtol=1e-5, atol=1e-7)
    x = g.standard_normal(1 << 16).astype(np.float32)
    np.testing.assert_allclose(
        backend.asnumpy(memory.silu_affine(xp.asarray(x))),
        memory.silu_affine_reference(x),
        rtol=1e-5,
        atol=1e-6,
    )
    assert float(memory.sum_reduce(xp.asarray(x), blocks=64)) == pytest.approx(
        float(x.sum(dtype=np.float64)), rel=1e-4, abs=1e-2
    )


@needs_gpu
def test_littles_law_kernels_match_numpy():
    xp = backend.xp
    nxt = littles_law.chase_order(4096, seed=1)
    final, cycles = littles_law.pointer_chase(xp.asarray(nxt), 500, start=17)
    assert final == littles_law.chase_reference(nxt, 500, start=17) and cycles > 0
    x = xp.asarray(np.random.default_rng().standard_normal(4 * 32 * 256 * 4, dtype=np.float32))
    got = littles_law.read_inflight(x, blocks=32, threads=256, chains=4)
    assert float(got.sum(dtype=xp.float64)) == pytest.approx(
        float(x.sum(dtype=xp.float64)), rel=1e-4, abs=1e-2
    )
    out, _ = littles_law.ffma_chains(4, 64, 4, 100)
    np.testing.assert_allclose(backend.asnumpy(out), littles_law.ffma_reference(4, 100), rtol=1e-5)
    out, _ = littles_law.mma_chains(2, 2, 3, 10)
    assert bool((out == 12.0).all())
