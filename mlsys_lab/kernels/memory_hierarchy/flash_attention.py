"""Launcher for the fused attention forward in ``memory_hierarchy/flash_attention.cu`` (FlashAttention-2).

    O = softmax(Q Kᵀ / sqrt(d) + mask) V        Q, K, V, O: (batch, heads, seq, d), bf16 bits (uint16)

The unfused chain writes and reads the (seq x seq) score matrix S and the probabilities P per head:
O(seq²) bytes of HBM traffic. The fused kernel (Dao 2023, "FlashAttention-2", Algorithm 1) keeps a
128-row tile of Q in registers, streams 64-key tiles of K and V through shared memory, and keeps a
running row max m and row sum l (the online softmax), so HBM sees Q, K, V once and O once: O(seq · d).
Both matrix products run on tensor cores (``mma.sync.m16n8k16``, bf16 in, fp32 accumulate).

:func:`attention_reference` is the float32 NumPy answer on the bf16 inputs; :func:`attention_unfused`
is the same chain on the GPU with CuPy (float32), the baseline the fusion is timed against.
FLOPs: 4 · batch · heads · seq² · d (two matmuls), half of it when causal (:func:`attention_flop`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import from_bf16_bits, occupancy_record
from mlsys_lab.validation import check_array, check_bool, check_choice, check_divisible, check_int

SOURCE = "memory_hierarchy/flash_attention.cu"
HEAD_DIMS = (64, 128)
BLOCK_ROWS, BLOCK_KEYS, THREADS = 128, 64, 256  # FA_BR, FA_BC, FA_THREADS in the .cu file
RELATIVE_ERROR_BOUND = 1e-2  # bf16 P and bf16 O against a float32 reference: ~3e-3 expected


def smem_bytes(head_dim: int) -> int:
    """Dynamic shared memory per block: the Q tile and two buffers each of K and V, bf16."""
    head_dim = check_int("head_dim", head_dim, low=1)
    return (BLOCK_ROWS + 4 * BLOCK_KEYS) * head_dim * 2


def attention_flop(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """Multiply-adds x 2 of Q Kᵀ and P V; causal attention does (about) half of them."""
    for label, size in (("batch", batch), ("heads", heads), ("seq", seq), ("head_dim", head_dim)):
        check_int(label, size, low=1)
    check_bool("causal", causal)
    flop = 4.0 * batch * heads * seq * seq * head_dim
    return flop / 2 if causal else flop


def _check_qkv(q, k, v, causal) -> None:
    """q, k, v: integer (bf16-bit) arrays of one (batch, heads, seq, d) shape; causal a bool."""
    shapes = [check_array(label, x, ndim=4, kinds="iu").shape for label, x in (("q", q), ("k", k), ("v", v))]
    for label, shape in zip(("k", "v"), shapes[1:], strict=True):
        if shape != shapes[0]:
            raise ValueError(f"{label} must have the shape of q {tuple(shapes[0])}; got {tuple(shape)}")
    check_bool("causal", causal)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """float32 NumPy attention of bf16-bit inputs (batch, heads, seq, d) -> float32 (batch, heads, seq, d)."""
    _check_qkv(q, k, v, causal)
    q32, k32, v32 = (from_bf16_bits(x) for x in (q, k, v))
    seq, d = q32.shape[-2:]
    s = (q32 @ np.swapaxes(k32, -1, -2)) / np.float32(math.sqrt(d))  # (b, h, seq, seq)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), dtype=bool)), s, np.float32(-np.inf))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v32).astype(np.float32)


def attention_unfused(q, k, v, causal: bool = False):
    """The unfused CuPy chain in float32: S = Q Kᵀ / sqrt(d) (written to HBM), softmax (read, write), P V."""
    _check_qkv(q, k, v, causal)
    xp = backend.xp
    q32, k32, v32 = ((x.astype(xp.uint32) << 16).view(xp.float32) for x in (q, k, v))
    seq, d = q.shape[-2:]
    s = xp.matmul(q32, xp.swapaxes(k32, -1, -2)) * np.float32(1 / math.sqrt(d))
    if causal:
        s = xp.where(xp.tril(xp.ones((seq, seq), dtype=bool)), s, np.float32(-np.inf))
    s = xp.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return xp.matmul(s, v32)


@functools.lru_cache(maxsize=None)
def compiled_attention(head_dim: int, causal: bool):
    """The compiled kernel for one head dimension and masking (cached), its shared-memory limit raised."""
    fn = loader.kernel(SOURCE, "flash_attention_fwd", {"HEAD_DIM": head_dim, "CAUSAL": int(causal)})
    fn.max_dynamic_shared_size_bytes = smem_bytes(head_dim)
    return fn


@functools.lru_cache(maxsize=256)
def _plan(layouts: tuple, out_layout: tuple | None, causal: bool) -> tuple:
    """Validate one combination of shapes, strides and item sizes once; return its
    :class:`~mlsys_lab.kernels.launch.PackedLaunch` (grid, block, shared memory, seq and the softmax scale)."""
    loader.require_gpu("flash_attention")
    shapes = [layout[0] for layout in layouts]
    if len(shapes[0]) != 4 or any(shape != shapes[0] for shape in shapes):
        raise ValueError(f"q, k and v must all be (batch, heads, seq, d); got {', '.join(map(str, shapes))}")
    batch, heads, seq, d = shapes[0]
    check_choice("head dimension d", d, HEAD_DIMS)
    if seq % BLOCK_ROWS:
        raise ValueError(f"seq must be a multiple of {BLOCK_ROWS}; got {seq}")
    contiguous = (2 * heads * seq * d, 2 * seq * d, 2 * d, 2)
    all_layouts = layouts + (out_layout or layouts[0],)
    for label, (shape, strides, size) in zip(("q", "k", "v", "out"), all_layouts, strict=True):
        if size != 2 or strides != contiguous or shape != shapes[0]:
            raise ValueError(f"{label} must be a C-contiguous {shapes[0]} array of 2-byte bf16 bits; got shape "
                             f"{shape}, item size {size}, strides {strides}")
    return PackedLaunch(compiled_attention(d, causal), (seq // BLOCK_ROWS, batch * heads), (THREADS,), smem_bytes(d),
                        4, (np.int32(seq), np.float32(math.log2(math.e) / math.sqrt(d))))


def flash_attention(q, k, v, causal: bool = False, out=None):
    """Fused attention forward on the GPU (``GPUUnavailable`` on a CPU). Returns bf16 bits like ``q``.

    Grid: (seq / 128 query tiles, batch x heads); 256 threads, 8 warps of 16 query rows each. The checks
    and the launch settings of a shape are computed once and cached (a repeated call is a look-up + launch).
    """
    layouts = tuple((x.shape, x.strides, x.dtype.itemsize) for x in (q, k, v))
    out_layout = None if out is None else (out.shape, out.strides, out.dtype.itemsize)
    launch = _plan(layouts, out_layout, bool(causal))
    if out is None:
        out = backend.xp.empty(q.shape, dtype=backend.xp.uint16)
    launch(q, k, v, out)
    return out


def kernel_resources(head_dim: int, causal: bool) -> dict:
    """Registers per thread, shared memory per block and occupancy of the compiled kernel (GPU only)."""
    loader.require_gpu("flash_attention")
    return occupancy_record(compiled_attention(head_dim, bool(causal)), THREADS, smem_bytes(head_dim))


def attention_ldmatrix_words(head_dim: int) -> np.ndarray:
    """Words of one ldmatrix phase (8 consecutive rows, same logical 16-byte chunk) for each chunk of a
    swizzled K/V/Q tile row: (head_dim / 8, 32). Feed to ``memory_hierarchy.bank_conflict_degree``."""
    head_dim = check_divisible("head_dim", check_int("head_dim", head_dim, low=8, high=1024), 8)
    rows = np.arange(8)
    return np.array([((rows * head_dim * 2 + (c ^ rows) * 16) // 4)[:, None] + np.arange(4)
                     for c in range(head_dim // 8)]).reshape(head_dim // 8, 32)
