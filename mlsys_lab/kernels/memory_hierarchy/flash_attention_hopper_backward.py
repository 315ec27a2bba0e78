"""Launcher for the Hopper attention backward in ``memory_hierarchy/flash_attention_hopper_backward.cu`` (sm_90a).

    dQ, dK, dV = attention_backward(Q, K, V, O, LSE, dO)    all (batch, heads, seq, d) bf16 bits but LSE
                                                             (batch, heads, seq) float32, from the forward

FlashAttention-2's Algorithm 2 (Dao 2023) on the forward's machinery (:mod:`.flash_attention_hopper`): P is
recomputed tile by tile from the saved log-sum-exp, so no seq x seq matrix exists. Three launches: D =
rowsum(dO ∘ O) per row; dK and dV, each block owning 128 keys and walking the query tiles; dQ, each block owning
128 query rows and walking the key tiles (the second walk computes S and dP again instead of adding dQ into HBM
with atomics). :mod:`.flash_attention_backward` is its NumPy reference and counts its FLOPs and bytes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import occupancy_record
from mlsys_lab.kernels.memory_hierarchy.flash_attention_hopper import HEAD_DIMS
from mlsys_lab.kernels.tma import tensor_map
from mlsys_lab.validation import check_choice, check_int

SOURCE = "memory_hierarchy/flash_attention_hopper_backward.cu"
KEYS_PER_BLOCK, QUERY_TILE = 128, 64        # B_KEYS, B_QTILE: the dK/dV kernel
QUERIES_PER_BLOCK, KEY_TILE = 128, 64       # B_QROWS, B_KTILE: the dQ kernel
THREADS, PREP_ROWS_PER_BLOCK = 384, 8       # B_THREADS; the prep kernel runs one warp per row
KERNELS = ("attention_backward_dkdv", "attention_backward_dq")


def backward_stages(head_dim: int) -> int:
    """Stages of each kernel's ring (B_STAGES): 4 of 32 KiB at d = 128, 6 of 16 KiB at d = 64."""
    return 4 if check_choice("head_dim", head_dim, HEAD_DIMS) == 128 else 6


def backward_smem_bytes(kernel: str, head_dim: int, stages: int | None = None) -> int:
    """Shared memory of one block of ``kernel``: the tiles it keeps (K and V, or Q and dO: 128 rows each), the
    ring (``stages`` of two 64-row tiles; None: the kernel's), the dK/dV ring's 512 bytes a stage of L and D,
    1 KiB of alignment slack and the mbarriers."""
    check_choice("kernel", kernel, KERNELS)
    default = backward_stages(head_dim)
    stages = default if stages is None else check_int("stages", stages, low=1, high=8)
    kept, tile = 2 * 128 * head_dim * 2, 2 * 64 * head_dim * 2
    vectors = 512 * stages if kernel == "attention_backward_dkdv" else 0
    return kept + stages * tile + vectors + 1024 + 8 * (1 + 2 * stages)


@functools.lru_cache(maxsize=None)
def compiled_backward(kernel: str, head_dim: int, causal: bool):
    """One compiled kernel of the backward (cached; GPUTooOld off compute capability 9.0)."""
    loader.require_gpu("the Hopper attention backward")
    check_choice("kernel", kernel, (*KERNELS, "attention_backward_prep"))
    fn = loader.kernel(SOURCE, kernel, {"HEAD_DIM": head_dim, "CAUSAL": int(bool(causal))}, arch="sm_90a")
    if kernel != "attention_backward_prep":
        fn.max_dynamic_shared_size_bytes = backward_smem_bytes(kernel, head_dim)
    return fn


def flash_attention_hopper_backward(q, k, v, o, lse, do, causal: bool = False, grads=None):
    """(dQ, dK, dV) as bf16 bits (the module's docstring); ``grads``, three arrays of q's shape, are reused."""
    loader.require_gpu("the Hopper attention backward")
    shape = tuple(q.shape)
    if len(shape) != 4 or any(tuple(x.shape) != shape for x in (k, v, o, do)):
        raise ValueError(f"q, k, v, o and do must all be (batch, heads, seq, d); got "
                         f"{', '.join(str(tuple(x.shape)) for x in (q, k, v, o, do))}")
    batch, heads, seq, d = shape
    check_choice("head dimension d", d, HEAD_DIMS)
    if seq % 128 or seq < 128:
        raise ValueError(f"seq must be a positive multiple of 128; got {seq}")
    for label, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        if x.dtype.itemsize != 2 or not x.flags.c_contiguous:
            raise ValueError(f"{label} must be a C-contiguous array of 2-byte bf16 bits; got {x.dtype}")
    if tuple(lse.shape) != shape[:3] or lse.dtype != np.float32:
        raise ValueError(f"lse must be float32 of shape {shape[:3]} (the forward's); got {lse.dtype} {lse.shape}")
    xp = backend.xp
    dq, dk, dv = (xp.empty(shape, dtype=xp.uint16) for _ in range(3)) if grads is None else grads
    rows = batch * heads * seq
    row_sums, lse2 = xp.empty(rows, xp.float32), xp.empty(rows, xp.float32)
    prep, dkdv, dq_plan = _plans(d, bool(causal), batch * heads, seq)
    prep(o, do, lse, row_sums, lse2)
    flat = [x.reshape(rows, d) for x in (q, k, v, do)]
    # TMA boxes: each kernel's own tiles are 128 rows, the tiles it walks 64 (Q, K, V, dO in that order)
    dkdv(*(tensor_map(x, box) for x, box in zip(flat, (64, 128, 128, 64), strict=True)), lse2, row_sums, dk, dv)
    dq_plan(*(tensor_map(x, box) for x, box in zip(flat, (128, 64, 64, 128), strict=True)), lse2, row_sums, dq)
    return dq, dk, dv


@functools.lru_cache(maxsize=64)
def _plans(d: int, causal: bool, heads: int, seq: int) -> tuple[PackedLaunch, PackedLaunch, PackedLaunch]:
    """The three launches for one shape: prep (D and L·log2 e), dK/dV, dQ."""
    rows = heads * seq
    scale = 1 / math.sqrt(d)
    scalars = (np.int32(seq), np.float32(math.log2(math.e) * scale), np.float32(scale))
    prep = PackedLaunch(compiled_backward("attention_backward_prep", d, causal),
                        (-(-rows // PREP_ROWS_PER_BLOCK),), (32 * PREP_ROWS_PER_BLOCK,), 0, 5, (np.int32(rows),))
    dkdv = PackedLaunch(compiled_backward(KERNELS[0], d, causal), (seq // KEYS_PER_BLOCK, heads), (THREADS,),
                        backward_smem_bytes(KERNELS[0], d), 8, scalars)
    dq = PackedLaunch(compiled_backward(KERNELS[1], d, causal), (seq // QUERIES_PER_BLOCK, heads), (THREADS,),
                      backward_smem_bytes(KERNELS[1], d), 7, scalars)
    return prep, dkdv, dq


def backward_resources(head_dim: int, causal: bool) -> dict:
    """Per kernel: registers per thread (as launched), shared memory per block and occupancy (GPU only)."""
    return {kernel: occupancy_record(compiled_backward(kernel, head_dim, bool(causal)), THREADS,
                                     backward_smem_bytes(kernel, head_dim)) for kernel in KERNELS}
