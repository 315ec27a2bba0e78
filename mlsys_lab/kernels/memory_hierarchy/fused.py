"""Fused kernels at copy bandwidth: a one-pass row softmax, a fused elementwise chain, a two-stage sum
(``fused.cu``), each beside its NumPy reference.

==========================  =====================================  ==============================
kernel                      what it shows                          reference
==========================  =====================================  ==============================
softmax_rows(_persistent)   one read, one write per element        :func:`softmax_reference`
silu_affine                 a fused elementwise chain              :func:`silu_affine_reference`
sum_partials                a reduction at copy bandwidth          ``x.sum()``
==========================  =====================================  ==============================

Launchers take and return device arrays and raise :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy import THREADS
from mlsys_lab.validation import check_array, check_choice, check_divisible, check_finite, check_int, check_number


def _softmax_defines(x, threads: int, blocks: int, blocks_name: str, streaming: bool, max_vec: int) -> dict:
    """Validate a softmax launch and return the kernel's compile-time settings (one row per block pass).

    Cached per (cols, settings): a launcher's host work is time the GPU idles between calls."""
    return _softmax_settings(x.shape[1], threads, blocks, blocks_name, bool(streaming), max_vec)


@functools.lru_cache(maxsize=256)
def _softmax_settings(cols: int, threads: int, blocks: int, blocks_name: str, streaming: bool, max_vec: int) -> dict:
    check_divisible("cols", cols, 4)
    threads = check_choice("threads", threads, (32, 64, 128, 256, 512, 1024))
    blocks = check_int(blocks_name, blocks, low=1, high=2048 // threads)
    vec = math.ceil(cols / 4 / threads)
    if vec > max_vec:
        raise ValueError(f"cols must be <= {4 * max_vec * threads} for threads={threads}; got {cols}")
    return {"SOFTMAX_THREADS": threads, "SOFTMAX_VEC": vec, "SOFTMAX_MIN_BLOCKS": blocks,
            "SOFTMAX_STREAMING": int(bool(streaming))}


@functools.lru_cache(maxsize=256)
def _softmax_rows_kernel(cols: int, threads: int, min_blocks: int, streaming: bool):
    """The compiled ``softmax_rows`` for one setting, looked up once: a repeated launch skips validation,
    building the compile options and the module look-up (host time the GPU would idle when calls are timed
    one by one)."""
    defines = _softmax_settings(cols, threads, min_blocks, "min_blocks", streaming, 16)
    return loader.kernel("memory_hierarchy/fused.cu", "softmax_rows", defines), np.int32(cols)


def softmax_rows(x, threads: int = THREADS, min_blocks: int = 1, streaming: bool = False, out=None):
    """Row softmax of a (rows, cols) float32 array in one pass; cols % 4 == 0, cols <= 64 * threads.

    One block of ``threads`` per row; the row stays in registers between the max, the sum and the write.
    ``min_blocks`` is the ``__launch_bounds__`` promise of how many blocks must fit on one SM (it caps the
    registers per thread, so it sets the occupancy); ``streaming`` marks the loads and stores evict-first.
    ``out``, an array like ``x``, is written instead of a new one (no allocation per call).
    """
    loader.require_gpu("softmax_rows")
    launch = _softmax_rows_launch(x.shape[0], x.shape[1], threads, min_blocks, bool(streaming))
    if out is None:
        out = backend.xp.empty_like(x)
    elif out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"out must be an array like x, {x.shape} {x.dtype}; got {out.shape} {out.dtype}")
    launch(x, out)
    return out


@functools.lru_cache(maxsize=256)
def _softmax_rows_launch(rows: int, cols: int, threads: int, min_blocks: int, streaming: bool) -> PackedLaunch:
    """The launch of ``softmax_rows`` for one shape and setting: one block per row, cols packed once."""
    kernel, cols32 = _softmax_rows_kernel(cols, threads, min_blocks, streaming)
    return PackedLaunch(kernel, (rows,), (threads,), 0, 2, (cols32,))


def softmax_rows_persistent(x, threads: int = THREADS, blocks_per_sm: int = 4, streaming: bool = False):
    """:func:`softmax_rows` with ``blocks_per_sm`` x (SM count) resident blocks that loop over the rows,
    loading the next row while reducing the current one (software pipelining; same bytes moved).
    Two rows live in registers, so cols <= 32 * threads."""
    loader.require_gpu("softmax_rows_persistent")
    xp = backend.xp
    defines = _softmax_defines(x, threads, blocks_per_sm, "blocks_per_sm", streaming, max_vec=8)
    y = xp.empty_like(x)
    rows, cols = x.shape
    n_sm = backend.sm_count()
    loader.kernel("memory_hierarchy/fused.cu", "softmax_rows_persistent", defines)(
        (min(rows, n_sm * blocks_per_sm),), (threads,), (x, y, np.int32(rows), np.int32(cols)))
    return y


def softmax_reference(x: np.ndarray) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along the last axis, in float64, returned as float32."""
    x64 = np.asarray(check_array("x", x, ndim=(1, 2, 3)), dtype=np.float64)  # -inf (a mask) is allowed
    if np.isnan(x64).any():
        raise ValueError("x must hold no NaN (-inf, a masked entry, is allowed)")
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def silu_affine(x, scale: float = 1.5, bias: float = -0.25):
    """y = z * sigmoid(z) with z = scale * x + bias, one fused kernel (``x.size % 4 == 0``)."""
    loader.require_gpu("silu_affine")
    xp = backend.xp
    check_divisible("x.size", x.size, 4)
    check_number("scale", scale)
    check_number("bias", bias)
    y = xp.empty_like(x)
    n4 = x.size // 4
    loader.kernel("memory_hierarchy/fused.cu", "silu_affine")((loader.blocks_for(n4, THREADS),), (THREADS,),
                                                    (x, y, np.float32(scale), np.float32(bias), np.int64(n4)))
    return y


def silu_affine_unfused(x, scale: float = 1.5, bias: float = -0.25):
    """The same chain as four array operations (four kernels, four trips through memory); NumPy too."""
    xp = backend.xp
    if not (getattr(x, "ndim", 0) in (1, 2, 3) and x.size and x.dtype.kind == "f"):  # dtype, shape: no pass
        check_array("x", x, ndim=(1, 2, 3), kinds="f")
    for name, value in (("scale", scale), ("bias", bias)):
        if type(value) is not float or value - value != 0.0:  # a finite float passes without a call
            check_finite(name, value)
    z = x * np.float32(scale) + np.float32(bias)
    return z / (np.float32(1.0) + xp.exp(-z))


def silu_affine_reference(x: np.ndarray, scale: float = 1.5, bias: float = -0.25) -> np.ndarray:
    """NumPy float64 reference of :func:`silu_affine`, returned as float32."""
    check_array("x", x, ndim=(1, 2, 3), finite=True)
    check_finite("scale", scale)
    check_finite("bias", bias)
    z = np.asarray(x, dtype=np.float64) * scale + bias
    return (z / (1.0 + np.exp(-z))).astype(np.float32)


def sum_reduce(x, blocks: int = 132 * 8):
    """sum(x) in two stages: a kernel writes one partial per block, then the partials are added."""
    loader.require_gpu("sum_reduce")
    xp = backend.xp
    check_divisible("x.size", x.size, 4)
    partial = xp.empty(blocks, dtype=xp.float32)
    fn = loader.kernel("memory_hierarchy/fused.cu", "sum_partials")
    fn((blocks,), (THREADS,), (x, partial, np.int64(x.size // 4)))
    return partial.sum(dtype=xp.float64)
