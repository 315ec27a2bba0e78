"""Do the tensor-core kernels (BF16 GEMM ladder, fused attention) compile, refuse bad inputs, and match NumPy?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend, records
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention, fused
from mlsys_lab.memory_hierarchy import bank_conflict_degree
from mlsys_lab.validation import relative_error

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
RNG = np.random.default_rng()


def random_bits(*shape: int) -> np.ndarray:
    return bf16_gemm.to_bf16_bits(RNG.standard_normal(shape, dtype=np.float32))


# ------------------------------------------------------------------------------ bf16, references
def test_bf16_rounding_is_to_nearest_even():
    one_and_half_ulp = np.float32(1 + 2**-8)  # exactly halfway between 1 and 1 + 2^-7: ties go to even (1)
    values = np.array([1.0, -2.0, one_and_half_ulp, 1 + 3 * 2**-8, 1 + 2**-9, np.inf, np.nan], dtype=np.float32)
    bits = bf16_gemm.to_bf16_bits(values)
    assert [hex(b) for b in bits[:6]] == ["0x3f80", "0xc000", "0x3f80", "0x3f82", "0x3f80", "0x7f80"]
    assert np.isnan(bf16_gemm.from_bf16_bits(bits[6:]))[0]


def test_every_bf16_pattern_survives_a_round_trip():
    bits = np.arange(2**16, dtype=np.uint16)
    back = bf16_gemm.to_bf16_bits(bf16_gemm.from_bf16_bits(bits))
    finite = ~np.isnan(bf16_gemm.from_bf16_bits(bits))
    np.testing.assert_array_equal(back[finite], bits[finite])


def test_gemm_reference_is_a_times_b_transposed():
    a, b = random_bits(5, 16), random_bits(7, 16)
    expected = bf16_gemm.from_bf16_bits(a).astype(np.float64) @ bf16_gemm.from_bf16_bits(b).astype(np.float64).T
    np.testing.assert_array_equal(bf16_gemm.gemm_reference(a, b), expected.astype(np.float32))


def test_attention_reference_rows_are_convex_combinations_of_v():
    q, k = random_bits(1, 2, 8, 64), random_bits(1, 2, 8, 64)
    v = bf16_gemm.to_bf16_bits(np.ones((1, 2, 8, 64), np.float32) * 3)
    np.testing.assert_allclose(flash_attention.attention_reference(q, k, v), 3.0, rtol=1e-6)
    v = random_bits(1, 2, 8, 64)  # causal: the first query sees only the first key
    causal = flash_attention.attention_reference(q, k, v, causal=True)
    np.testing.assert_allclose(causal[:, :, 0], bf16_gemm.from_bf16_bits(v)[:, :, 0], rtol=1e-6)


def test_attention_flop_counts_two_matmuls_and_halves_when_causal():
    assert flash_attention.attention_flop(2, 3, 128, 64, causal=False) == 4 * 2 * 3 * 128 * 128 * 64
    assert flash_attention.attention_flop(2, 3, 128, 64, causal=True) == 2 * 2 * 3 * 128 * 128 * 64


# ---------------------------------------------------------------------------------- bank conflicts
def test_bank_model_sees_the_conflicts_each_layout_was_built_for():
    """Padding (wmma) and swizzling (pipeline, wgmma, attention) are conflict-free; 64-byte rows are 4-way."""
    passes = {name: int(bank_conflict_degree(bf16_gemm.ldmatrix_phase_words(name)).max())
              for name in bf16_gemm.STEPS}
    assert passes == {"wmma": 1, "mma_ldmatrix": 4, "pipeline": 1, "wgmma": 1}
    assert int(bank_conflict_degree(bf16_gemm.tile_store_words("pipeline")).max()) == 1
    for d in flash_attention.HEAD_DIMS:
        words = flash_attention.attention_ldmatrix_words(d)
        assert words.shape == (d // 8, 32) and int(bank_conflict_degree(words).max()) == 1
        unswizzled = (np.arange(8)[:, None] * d * 2 // 4 + np.arange(4)).ravel()  # same chunk of 8 rows
        assert int(bank_conflict_degree(unswizzled)[0]) == 8  # what the swizzle avoids


# ---------------------------------------------------------------------------------- argument checks
def test_shapes_must_be_multiples_of_the_block_tile():
    with pytest.raises(ValueError, match=r"N must be a multiple of 256 .*got 128"):
        bf16_gemm.check_gemm_shapes(bf16_gemm.STEPS["pipeline"], 128, 128, 64)
    with pytest.raises(ValueError, match="K must be a multiple of 32"):
        bf16_gemm.check_gemm_shapes(bf16_gemm.STEPS["wmma"], 128, 128, 48)
    bf16_gemm.check_gemm_shapes(bf16_gemm.STEPS["wgmma"], 256, 512, 128)


def test_unknown_step_is_a_value_error():
    with pytest.raises(ValueError, match="step must be one of"):
        bf16_gemm.bf16_gemm(np.zeros((128, 64), np.uint16), np.zeros((128, 64), np.uint16), "fastest")


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_launchers_without_gpu_say_why():
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        bf16_gemm.bf16_gemm(np.zeros((128, 64), np.uint16), np.zeros((256, 64), np.uint16), "wmma")
    q = np.zeros((1, 1, 128, 64), np.uint16)
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        flash_attention.flash_attention(q, q, q)


def test_softmax_settings_are_validated_once_per_shape():
    """Is the fused softmax's host work cached (the GPU idles while a launcher validates)?"""
    fused._softmax_settings.cache_clear()
    x = np.zeros((4, 1024), np.float32)
    first = fused._softmax_defines(x, 256, 1, "min_blocks", False, 16)
    assert fused._softmax_defines(x, 256, 1, "min_blocks", False, 16) is first
    assert fused._softmax_settings.cache_info().hits == 1 and first["SOFTMAX_VEC"] == 1
    with pytest.raises(ValueError, match="cols must be a multiple of 4"):
        fused._softmax_defines(np.zeros((4, 1022), np.float32), 256, 1, "min_blocks", False, 16)


# ---------------------------------------------------------------------------------- nvcc compiles
def nvcc_ptx(tmp_path, source: str, arch: str, *defines: str) -> str:
    out = tmp_path / f"{arch}.ptx"
    done = subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "--ptx", *defines, "-o", str(out),
                           str(loader.source_path(source))], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_gemm_ladder_compiles_and_wgmma_only_for_sm90a(tmp_path, arch):
    ptx = nvcc_ptx(tmp_path, bf16_gemm.SOURCE, arch)
    assert ptx.count(".entry") == len(bf16_gemm.STEPS)
    assert ("wgmma.mma_async" in ptx) == (arch == "sm_90a")
    assert "ldmatrix" in ptx and "cp.async.cg" in ptx and "wmma.mma.sync" in ptx


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("head_dim", flash_attention.HEAD_DIMS)
def test_flash_attention_compiles_for_each_head_dim_and_mask(tmp_path, arch, head_dim):
    for causal in (0, 1):
        ptx = nvcc_ptx(tmp_path, flash_attention.SOURCE, arch, f"-DHEAD_DIM={head_dim}", f"-DCAUSAL={causal}")
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx and "ldmatrix" in ptx


# ---------------------------------------------------------------------------------- the record
def test_record_says_where_and_shows_the_targets():
    run = records.load("tensor_cores_h200")
    assert run["device"] and run["date"]
    assert all(step["passed"] for step in run["gemm_correctness"].values())
    assert all(case["passed"] for case in run["attention_correctness"].values())
    steps = run["gemm_timing"]["8192"]["steps"]
    assert max(s["fraction_of_cublas"] for s in steps.values()) >= 0.7
    assert run["attention_timing"]["d128_full"]["4096"]["fraction_of_sdpa"] >= 0.5


# ---------------------------------------------------------------------------------- on the GPU
@needs_gpu
@pytest.mark.parametrize("step", list(bf16_gemm.STEPS))
def test_every_step_matches_numpy_on_fresh_inputs(step):
    if bf16_gemm.STEPS[step].arch == "sm_90a" and backend.xp.cuda.Device().compute_capability != "90":
        with pytest.raises(loader.GPUUnavailable, match="sm_90a"):
            bf16_gemm.bf16_gemm(backend.xp.zeros((128, 64), np.uint16), backend.xp.zeros((256, 64), np.uint16), step)
        return
    for m, n, k in ((256, 512, 512), (384, 768, 1024)):
        a, b = random_bits(m, k), random_bits(n, k)
        got = bf16_gemm.bf16_gemm(backend.xp.asarray(a), backend.xp.asarray(b), step)
        error = relative_error(bf16_gemm.from_bf16_bits(got), bf16_gemm.gemm_reference(a, b))
        assert error < bf16_gemm.RELATIVE_ERROR_BOUND, (step, (m, n, k), error)


@needs_gpu
def test_gemm_refuses_bad_shapes_and_layouts():
    xp = backend.xp
    with pytest.raises(ValueError, match="a must be"):
        bf16_gemm.bf16_gemm(xp.zeros((128, 64), np.uint16), xp.zeros((256, 32), np.uint16), "wmma")
    with pytest.raises(ValueError, match="C-contiguous"):
        bf16_gemm.bf16_gemm(xp.zeros((64, 128), np.uint16).T, xp.zeros((128, 64), np.uint16), "wmma")
    with pytest.raises(ValueError, match="2-byte"):
        bf16_gemm.bf16_gemm(xp.zeros((128, 64), np.float32), xp.zeros((128, 64), np.float32), "wmma")


@needs_gpu
@pytest.mark.parametrize("head_dim", flash_attention.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_matches_numpy_on_fresh_inputs(head_dim, causal):
    q, k, v = (random_bits(2, 3, 384, head_dim) for _ in range(3))
    got = flash_attention.flash_attention(*(backend.xp.asarray(x) for x in (q, k, v)), causal=causal)
    error = relative_error(bf16_gemm.from_bf16_bits(got), flash_attention.attention_reference(q, k, v, causal))
    assert error < flash_attention.RELATIVE_ERROR_BOUND, error


@needs_gpu
def test_flash_attention_agrees_with_the_unfused_chain_and_refuses_odd_lengths():
    q, k, v = (backend.xp.asarray(random_bits(1, 2, 256, 64)) for _ in range(3))
    fused_out = bf16_gemm.from_bf16_bits(flash_attention.flash_attention(q, k, v, causal=True))
    assert relative_error(fused_out, flash_attention.attention_unfused(q, k, v, causal=True)) < 1e-2
    odd = backend.xp.zeros((1, 1, 200, 64), np.uint16)
    with pytest.raises(ValueError, match="multiple of 128"):
        flash_attention.flash_attention(odd, odd, odd)
