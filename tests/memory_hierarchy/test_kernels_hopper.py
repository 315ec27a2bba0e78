"""Do the Hopper kernels (FP8 block-scaled GEMM, attention forward on wgmma) compile for sm_90a only, refuse bad
inputs and other GPUs in one line, and match their references on fresh random inputs on an H100/H200?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend, records
from mlsys_lab.kernels import loader, tma
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention, flash_attention_hopper, fp8_block_gemm
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import attention_forward_lse
from mlsys_lab.memory_hierarchy import hopper
from mlsys_lab.training_memory.fp8 import dequantize_fp8_blocks, quantize_fp8_blocks
from mlsys_lab.training_memory.fp8_gemm import fp8_gemm_error_bound
from mlsys_lab.validation import relative_error

on_hopper = backend.on_gpu and backend.compute_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not on_hopper, reason="needs an H100/H200 (compute capability 9.0, sm_90a)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
RNG = np.random.default_rng()


def nvcc_ptx(tmp_path, source: str, arch: str, *defines: str) -> str:
    out = tmp_path / "k.ptx"
    subprocess.run(["nvcc", "-ptx", f"-arch={arch}", *defines, "-o", str(out), str(loader.source_path(source))],
                   check=True, capture_output=True)
    return out.read_text()


# --------------------------------------------------------------------------------- sizes, by hand
def test_shared_memory_of_each_kernel_is_its_tiles_plus_slack():
    # attention, d = 128: Q 128 x 128 bf16 (32 KiB) + 3 stages of K and V (6 x 32 KiB) + 1 KiB + 7 mbarriers
    assert flash_attention_hopper.hopper_attention_smem_bytes(128) == 32768 + 6 * 32768 + 1024 + 56
    assert flash_attention_hopper.hopper_attention_smem_bytes(128, stages=2) == 32768 + 4 * 32768 + 1024 + 40
    assert flash_attention_hopper.hopper_attention_smem_bytes(64) == 16384 + 8 * 16384 + 1024 + 72
    # FP8: 128 rows of A and block_n rows of B, 128 bytes each, per stage
    assert fp8_block_gemm.fp8_gemm_smem_bytes(256) == 4 * 384 * 128 + 1024 + 64
    assert fp8_block_gemm.fp8_gemm_smem_bytes(128) == 6 * 256 * 128 + 1024 + 96
    for size in (flash_attention_hopper.hopper_attention_smem_bytes(128), fp8_block_gemm.fp8_gemm_smem_bytes(128)):
        assert size <= 227 * 1024  # Hopper's largest dynamic shared memory per block


def test_bad_settings_name_the_parameter():
    with pytest.raises(ValueError, match="head_dim"):
        flash_attention_hopper.hopper_attention_stages(96)
    with pytest.raises(ValueError, match="stages"):
        flash_attention_hopper.hopper_attention_smem_bytes(128, stages=5)
    with pytest.raises(ValueError, match="block_n"):
        fp8_block_gemm.fp8_gemm_stages(192)
    with pytest.raises(ValueError, match="1- or 2-byte items"):
        tma.tensor_map(np.zeros((128, 64), np.float32), 128)
    with pytest.raises(ValueError, match="at most 256 rows of 128 bytes"):
        tma.tensor_map(np.zeros((512, 64), np.uint16), 512)


def test_persistent_grid_is_one_even_block_per_sm_at_most():
    assert fp8_block_gemm.fp8_gemm_grid(8192, 8192, 128, False, 132) == 64 * 64  # a block per tile
    assert fp8_block_gemm.fp8_gemm_grid(8192, 8192, 256, True, 132) == 132
    assert fp8_block_gemm.fp8_gemm_grid(8192, 8192, 128, True, 133) == 132  # even: clusters of two
    assert fp8_block_gemm.fp8_gemm_grid(256, 512, 128, True, 132) == 8  # fewer tiles than SMs
    with pytest.raises(ValueError, match="sm_count"):
        fp8_block_gemm.fp8_gemm_grid(256, 512, 128, True, 1)


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_launchers_without_gpu_say_why():
    q = np.zeros((1, 1, 128, 128), np.uint16)
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        flash_attention_hopper.flash_attention_hopper(q, q, q)
    codes, scales = np.zeros((128, 128), np.uint8), np.ones((128, 1), np.float32)
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        fp8_block_gemm.fp8_block_gemm_on_gpu(codes, scales, codes, np.ones((1, 1), np.float32))


@needs_nvcc
def test_hopper_kernels_hold_wgmma_only_for_sm90a(tmp_path):
    """The sm_90a build issues wgmma, TMA and setmaxnreg; any other target compiles an empty stub (the launcher
    refuses it before it runs)."""
    for source, defines, shape in ((flash_attention_hopper.SOURCE, ("-DHEAD_DIM=128", "-DCAUSAL=1"), "m64n128k16"),
                                   (fp8_block_gemm.SOURCE, (), "m64n128k32.f32.e4m3.e4m3")):
        hopper = nvcc_ptx(tmp_path, source, "sm_90a", *defines)
        assert f"wgmma.mma_async.sync.aligned.{shape}" in hopper
        assert "cp.async.bulk.tensor.2d" in hopper and "setmaxnreg" in hopper
        assert "wgmma" not in nvcc_ptx(tmp_path, source, "sm_90", *defines)


# ---------------------------------------------------------------------------------- the record
def test_record_names_the_machine_and_holds_the_ratios_it_quotes():
    run = records.load(hopper.RECORD)
    assert run["device"].startswith("NVIDIA H") and run["date"]
    assert all(check["passed"] for key, check in run.items() if key.startswith("fp8_check_"))
    assert all(check["passed"] for key, check in run["attention_checks"].items() if key.startswith("default"))
    fp8 = run["fp8_8192"]
    assert fp8["fraction_of_scaled_mm"]["course_default"] == pytest.approx(
        fp8["course_default"]["flop_per_s"] / fp8["scaled_mm"]["per_tensor"]["flop_per_s"])
    for row in run["attention"].values():
        assert row["hopper_default"]["flop_per_s"] > row["fa2_course"]["flop_per_s"]  # the step pays


# ---------------------------------------------------------------------------------- on the GPU
@pytest.mark.skipif(not backend.on_gpu or on_hopper, reason="checks the refusal on a GPU other than 9.0")
def test_other_gpus_are_refused_in_one_line():
    q = backend.xp.zeros((1, 1, 128, 128), backend.xp.uint16)
    with pytest.raises(loader.GPUUnavailable, match="sm_90a"):
        flash_attention_hopper.flash_attention_hopper(q, q, q)


@needs_hopper
@pytest.mark.parametrize("block_n", fp8_block_gemm.BLOCK_NS)
def test_fp8_gemm_is_within_its_error_bound_on_fresh_inputs(block_n):
    xp = backend.xp
    # the last has more tiles than the H200 has SMs: a persistent block runs two or three of them
    for m, n, k in ((128, block_n, 128), (384, 2 * block_n, 1024), (256, block_n, 3072), (2048, 2304, 384)):
        a = RNG.standard_normal((m, k)).astype(np.float32)
        a[:, RNG.integers(0, k, size=2)] *= 100.0  # outlier channels
        b = (RNG.standard_normal((n, k)) * 0.02).astype(np.float32)
        qa, qb = quantize_fp8_blocks(a, 1, 128), quantize_fp8_blocks(b, 128, 128)
        got = bf16_gemm.from_bf16_bits(fp8_block_gemm.fp8_block_gemm_on_gpu(
            xp.asarray(qa.codes), xp.asarray(qa.scales), xp.asarray(qb.codes), xp.asarray(qb.scales), block_n))
        exact = dequantize_fp8_blocks(qa) @ dequantize_fp8_blocks(qb).T
        bound = fp8_gemm_error_bound(qa, qb) + fp8_block_gemm.BF16_UNIT_ROUNDOFF * np.abs(exact)
        assert (np.abs(got - exact) <= bound).all(), ((m, n, k), float((np.abs(got - exact) / bound).max()))
        assert relative_error(got, exact) < 4e-3  # bf16 output rounding dominates: ~1.7e-3 measured


@needs_hopper
def test_fp8_gemm_refuses_shapes_off_its_tiles():
    xp = backend.xp
    codes, scales = xp.zeros((128, 256), xp.uint8), xp.ones((128, 2), xp.float32)
    with pytest.raises(ValueError, match="N must be a positive multiple of 256"):
        fp8_block_gemm.fp8_block_gemm_on_gpu(codes, scales, codes, xp.ones((1, 2), xp.float32), 256)
    with pytest.raises(ValueError, match="b_scales must be float32 of shape"):
        fp8_block_gemm.fp8_block_gemm_on_gpu(codes, scales, codes, xp.ones((1, 1), xp.float32), 128)


@needs_hopper
@pytest.mark.parametrize("head_dim", flash_attention_hopper.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_attention_matches_numpy_and_saves_the_log_sum_exp(head_dim, causal):
    for batch, heads, seq in ((1, 1, 128), (2, 3, 384), (1, 2, 640)):
        q, k, v = (bf16_gemm.to_bf16_bits(RNG.standard_normal((batch, heads, seq, head_dim), dtype=np.float32))
                   for _ in range(3))
        out, lse = flash_attention_hopper.flash_attention_hopper(*(backend.xp.asarray(x) for x in (q, k, v)), causal)
        ref_o, ref_lse = attention_forward_lse(*(bf16_gemm.from_bf16_bits(x).astype(np.float64) for x in (q, k, v)),
                                               causal=causal)
        error = relative_error(bf16_gemm.from_bf16_bits(out), ref_o)
        assert error < flash_attention.RELATIVE_ERROR_BOUND, ((batch, heads, seq), error)
        np.testing.assert_allclose(backend.asnumpy(lse), ref_lse, atol=1e-4)


@needs_hopper
def test_hopper_attention_refuses_odd_lengths_and_head_dims():
    xp = backend.xp
    with pytest.raises(ValueError, match="seq must be a positive multiple of 128"):
        q = xp.zeros((1, 1, 192, 128), xp.uint16)
        flash_attention_hopper.flash_attention_hopper(q, q, q)
    with pytest.raises(ValueError, match="head dimension d"):
        q = xp.zeros((1, 1, 128, 96), xp.uint16)
        flash_attention_hopper.flash_attention_hopper(q, q, q)
