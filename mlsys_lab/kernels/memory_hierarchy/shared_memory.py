"""Shared memory (on-chip SRAM, 32 banks): a tiled transpose with and without padding, and strided bank reads.

==========================  =====================================  ==============================
kernel (``shared.cu``)      what it shows                          reference
==========================  =====================================  ==============================
transpose_naive             uncoalesced writes                     ``x.T``
transpose_shared            tiling; a 32-way conflict on the load  ``x.T``
transpose_shared_padded     one padding column removes it          ``x.T``
shared_stride               gcd(stride, 32)-way bank conflicts     :func:`shared_stride_reference`
==========================  =====================================  ==============================

Launchers take and return device arrays and raise :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_choice, check_int

TRANSPOSE_KERNELS = ("transpose_naive", "transpose_shared", "transpose_shared_padded")


def transpose_on_gpu(x, variant: str = "transpose_shared_padded"):
    """out = x.T (rows, cols) -> (cols, rows) with one of ``TRANSPOSE_KERNELS``."""
    loader.require_gpu("transpose_on_gpu")
    xp = backend.xp
    check_choice("variant", variant, TRANSPOSE_KERNELS)
    rows, cols = x.shape
    out = xp.empty((cols, rows), dtype=xp.float32)
    grid = (loader.blocks_for(cols, 32), loader.blocks_for(rows, 32))
    loader.kernel("memory_hierarchy/shared.cu", variant)(grid, (32, 8), (x, out, np.int32(rows), np.int32(cols)))
    return out


def shared_stride(stride: int, iters: int = 4096, blocks: int = 132 * 16, threads: int = 512):
    """Each thread reads shared word ``lane * stride`` ``iters`` times; returns the per-thread sums."""
    loader.require_gpu("shared_stride")
    xp = backend.xp
    check_int("stride", stride, low=1, high=32)
    check_int("iters", iters, low=1, high=2**14)
    out = xp.empty(blocks * threads, dtype=xp.float32)
    fn = loader.kernel("memory_hierarchy/shared.cu", "shared_stride")
    fn((blocks,), (threads,), (out, np.int32(stride), np.int32(iters)))
    return out


def shared_stride_reference(stride: int, iters: int, n_threads: int) -> np.ndarray:
    """What :func:`shared_stride` returns: ``iters * (lane * stride)`` for every thread."""
    check_int("stride", stride, low=0, high=1024)
    check_int("iters", iters, low=0, high=2**20)
    check_int("n_threads", n_threads, low=1, high=2**20)
    lanes = np.arange(n_threads) % 32
    return (iters * ((lanes * stride) & 1023)).astype(np.float32)
