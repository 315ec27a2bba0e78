"""Launcher for the Hopper attention forward in ``memory_hierarchy/flash_attention_hopper.cu`` (sm_90a only).

    O, LSE = attention(Q, K, V)    Q, K, V, O: (batch, heads, seq, d) bf16 bits; LSE: (batch, heads, seq) float32

The step after :mod:`~mlsys_lab.kernels.memory_hierarchy.flash_attention` (FlashAttention-2 on ``mma.sync``), in
FlashAttention-3's way (Shah et al. 2024): TMA copies, a producer warp group and two consumer warp groups, ``wgmma``
for both matrix products, and the P·V of one key tile left in flight while the next tile's scores are issued.
It also returns LSE = log Σ_j exp(q·k_j / sqrt(d)) per query row, what the backward pass recomputes P from
(:mod:`~mlsys_lab.kernels.memory_hierarchy.flash_attention_backward` is its NumPy reference).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import occupancy_record
from mlsys_lab.kernels.tma import tensor_map
from mlsys_lab.validation import check_choice, check_int

SOURCE = "memory_hierarchy/flash_attention_hopper.cu"
HEAD_DIMS = (64, 128)
BLOCK_ROWS, BLOCK_KEYS, THREADS = 128, 128, 384  # H_BR, H_BC, H_THREADS in the .cu file


def hopper_attention_stages(head_dim: int) -> int:
    """Stages of the K/V ring (H_STAGES): 3 of 64 KiB at d = 128, 4 of 32 KiB at d = 64."""
    return 3 if check_choice("head_dim", head_dim, HEAD_DIMS) == 128 else 4


def hopper_attention_smem_bytes(head_dim: int, stages: int | None = None) -> int:
    """Q's tile, the ring of K and V tiles (``stages`` of them; None: the kernel's), 1 KiB of alignment slack and
    the mbarriers."""
    default = hopper_attention_stages(head_dim)  # checks head_dim
    stages = default if stages is None else check_int("stages", stages, low=1, high=4)
    tile = BLOCK_KEYS * head_dim * 2
    return BLOCK_ROWS * head_dim * 2 + stages * 2 * tile + 1024 + 8 * (1 + 2 * stages)


@functools.lru_cache(maxsize=None)
def compiled_hopper_attention(head_dim: int, causal: bool):
    """The compiled kernel for one head dimension and masking (cached; GPUTooOld off compute capability 9.0)."""
    loader.require_gpu("the Hopper attention forward")
    fn = loader.kernel(SOURCE, "flash_attention_hopper", {"HEAD_DIM": head_dim, "CAUSAL": int(bool(causal))},
                       arch="sm_90a")
    fn.max_dynamic_shared_size_bytes = hopper_attention_smem_bytes(head_dim)
    return fn


def flash_attention_hopper(q, k, v, causal: bool = False, out=None, lse=None):
    """(O, LSE) of attention on the GPU (the module's docstring); ``out`` and ``lse`` are reused when given."""
    loader.require_gpu("the Hopper attention forward")
    shape = tuple(q.shape)
    if len(shape) != 4 or tuple(k.shape) != shape or tuple(v.shape) != shape:
        raise ValueError(f"q, k and v must all be (batch, heads, seq, d); got {q.shape}, {k.shape}, {v.shape}")
    batch, heads, seq, d = shape
    check_choice("head dimension d", d, HEAD_DIMS)
    if seq % BLOCK_ROWS or seq < BLOCK_ROWS:
        raise ValueError(f"seq must be a positive multiple of {BLOCK_ROWS}; got {seq}")
    for label, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype.itemsize != 2 or not x.flags.c_contiguous:
            raise ValueError(f"{label} must be a C-contiguous array of 2-byte bf16 bits; got {x.dtype}")
    xp = backend.xp
    out = xp.empty(shape, dtype=xp.uint16) if out is None else out
    lse = xp.empty(shape[:3], dtype=xp.float32) if lse is None else lse
    rows = batch * heads * seq
    maps = [tensor_map(x.reshape(rows, d), BLOCK_ROWS) for x in (q, k, v)]
    scalars = (np.int32(seq), np.float32(math.log2(math.e) / math.sqrt(d)))
    launch = PackedLaunch(compiled_hopper_attention(d, bool(causal)), (seq // BLOCK_ROWS, batch * heads), (THREADS,),
                          hopper_attention_smem_bytes(d), 5, scalars)
    launch(*maps, out, lse)
    return out, lse


def hopper_attention_resources(head_dim: int, causal: bool) -> dict:
    """Registers per thread (as launched), shared memory per block and occupancy (GPU only)."""
    return occupancy_record(compiled_hopper_attention(head_dim, bool(causal)), THREADS,
                            hopper_attention_smem_bytes(head_dim))
