"""Launcher for the FP8 block-scaled GEMM in ``memory_hierarchy/fp8_block_gemm.cu`` (Hopper, sm_90a only).

    C = A · Bᵀ    A (M, K) E4M3 codes, scales (M, K / 128): one per 1 x 128 block (a token's 128 channels)
                  B (N, K) E4M3 codes, scales (N / 128, K / 128): one per 128 x 128 block (weights)
                  C (M, N) bf16 bits

This is DeepSeek-V3's recipe (§3.3): the tensor cores sum at most 128 products of codes into a temporary
accumulator, and the CUDA cores promote it into fp32 with the two blocks' scales. What it computes is
:func:`mlsys_lab.training_memory.fp8_gemm.fp8_block_gemm` (the emulation, with the accumulator's limited
precision), and it is checked against the float64 product of the dequantized inputs with that module's
error bound (:func:`mlsys_lab.training_memory.fp8_gemm.fp8_gemm_error_bound`) plus the bf16 rounding of C.

``block_n`` picks the block tile's width: 128 (two 64-register temporaries per consumer: the tensor cores fill
one with the next K interval while the CUDA cores promote the other, FP8_PIPELINE) or 256 (two halves promoted
through one temporary: twice the tensor-core work per byte of A read from shared memory, but no registers left
for a second temporary). Either runs on a persistent grid (:func:`fp8_gemm_grid`). 128 is the default: on the
H200 at 8192³ it measured 73% of ``torch._scaled_mm`` against 66% for 256 (``data/hopper_kernels_h200.json``).
"""

from __future__ import annotations

import functools

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import occupancy_record
from mlsys_lab.kernels.tma import tensor_map
from mlsys_lab.validation import check_bool, check_choice, check_int

SOURCE = "memory_hierarchy/fp8_block_gemm.cu"
BLOCK_M, BLOCK_K, THREADS = 128, 128, 384  # F_BM, F_BK, F_THREADS in the .cu file
BLOCK_NS = (128, 256)
BF16_UNIT_ROUNDOFF = 2.0 ** -8  # C is rounded to bf16 (8 significant bits) after the fp32 accumulation


def fp8_gemm_grid(m: int, n: int, block_n: int, persistent: bool, sm_count: int) -> int:
    """Blocks to launch: one per 128 x ``block_n`` tile of C, or, ``persistent``, at most one per SM (an even
    number, for clusters of two), each running every ``grid``-th tile, so that a block's producer loads the next
    tile while its consumers store this one's C.

    >>> fp8_gemm_grid(8192, 8192, 128, False, 132), fp8_gemm_grid(8192, 8192, 128, True, 132)
    (4096, 132)
    """
    check_int("m", m, low=BLOCK_M)
    check_int("n", n, low=check_choice("block_n", block_n, BLOCK_NS))
    check_bool("persistent", persistent)
    check_int("sm_count", sm_count, low=2)
    tiles = (m // BLOCK_M) * (n // block_n)
    return min(tiles, sm_count - sm_count % 2) if persistent else tiles


def fp8_gemm_stages(block_n: int) -> int:
    """Shared-memory stages of the TMA ring (F_STAGES): 6 of 32 KiB at block_n 128, 4 of 48 KiB at 256."""
    return 6 if check_choice("block_n", block_n, BLOCK_NS) == 128 else 4


def fp8_gemm_smem_bytes(block_n: int) -> int:
    """Dynamic shared memory of a block: the ring, 1 KiB of alignment slack, and the mbarriers."""
    return fp8_gemm_stages(block_n) * (BLOCK_M + block_n) * BLOCK_K + 1024 + 16 * fp8_gemm_stages(block_n)


@functools.lru_cache(maxsize=None)
def compiled_fp8_gemm(block_n: int):
    """The compiled kernel for one block width (cached; GPUTooOld on anything but compute capability 9.0)."""
    loader.require_gpu("the FP8 block-scaled GEMM")
    # (FP8_PIPELINE follows FP8_BN in the .cu: two temporaries fit at 128 only)
    fn = loader.kernel(SOURCE, "fp8_block_gemm", {"FP8_BN": block_n}, arch="sm_90a")
    fn.max_dynamic_shared_size_bytes = fp8_gemm_smem_bytes(block_n)
    return fn


def _check(a_codes, a_scales, b_codes, b_scales, block_n: int) -> tuple[int, int, int]:
    check_choice("block_n", block_n, BLOCK_NS)
    if a_codes.ndim != 2 or b_codes.ndim != 2 or a_codes.shape[1] != b_codes.shape[1]:
        raise ValueError(f"a_codes must be (M, K) and b_codes (N, K); got {a_codes.shape} and {b_codes.shape}")
    (m, k), n = a_codes.shape, b_codes.shape[0]
    for label, size, multiple in (("M", m, BLOCK_M), ("N", n, block_n), ("K", k, BLOCK_K)):
        if size < multiple or size % multiple:
            raise ValueError(f"{label} must be a positive multiple of {multiple} (block_n {block_n}); got {size}")
    for label, x in (("a_codes", a_codes), ("b_codes", b_codes)):
        if x.dtype.itemsize != 1 or not x.flags.c_contiguous:
            raise ValueError(f"{label} must be C-contiguous 1-byte E4M3 codes (uint8); got {x.dtype}")
    for label, x, shape in (("a_scales", a_scales, (m, k // 128)), ("b_scales", b_scales, (n // 128, k // 128))):
        if tuple(x.shape) != shape or x.dtype != np.float32:
            raise ValueError(f"{label} must be float32 of shape {shape}; got {x.dtype} {tuple(x.shape)}")
    return m, n, k


def fp8_block_gemm_on_gpu(a_codes, a_scales, b_codes, b_scales, block_n: int = 128, out=None):
    """C = A · Bᵀ (bf16 bits, (M, N)) from block-scaled E4M3 operands on the GPU (the module's docstring).

    ``a_scales`` (M, K/128) and ``b_scales`` (N/128, K/128) are float32 device arrays (the layouts of
    :func:`~mlsys_lab.training_memory.fp8.quantize_fp8_blocks`); A's are handed to the kernel transposed,
    (K/128, M), so that the rows of one K interval read consecutive scales. ``GPUUnavailable`` on a CPU,
    ``GPUTooOld`` on a GPU other than compute capability 9.0.
    """
    loader.require_gpu("the FP8 block-scaled GEMM")
    m, n, k = _check(a_codes, a_scales, b_codes, b_scales, block_n)
    xp = backend.xp
    if out is None:
        out = xp.empty((m, n), dtype=xp.uint16)
    grid = fp8_gemm_grid(m, n, block_n, True, backend.sm_count())
    launch = PackedLaunch(compiled_fp8_gemm(block_n), (grid,), (THREADS,),
                          fp8_gemm_smem_bytes(block_n), 5, (np.int32(m), np.int32(n), np.int32(k)))
    launch(tensor_map(a_codes, BLOCK_M), tensor_map(b_codes, block_n), xp.ascontiguousarray(a_scales.T),
           xp.ascontiguousarray(b_scales), out)
    return out


def fp8_gemm_resources(block_n: int) -> dict:
    """Registers per thread (as launched: setmaxnreg then moves them), shared memory and occupancy (GPU only)."""
    return occupancy_record(compiled_fp8_gemm(block_n), THREADS, fp8_gemm_smem_bytes(block_n))
