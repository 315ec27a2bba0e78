"""Global memory (HBM through L2): the course's copy, strided reads, and an L2-resident buffer read many times.

==========================  =====================================  ==============================
kernel (``global.cu``)      what it shows                          reference
==========================  =====================================  ==============================
copy_float4                 the course's own copy                  ``x.copy()``
read_strided                sectors per warp grow with the stride  ``x[::stride][:n]``
read_passes                 an L2-resident buffer read many times  ``passes * x.sum()``
==========================  =====================================  ==============================

Launchers take and return device arrays and raise :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import THREADS
from mlsys_lab.validation import check_divisible, check_int


def copy(x):
    """y = x with the course's float4 copy kernel (``x.size % 4 == 0``)."""
    loader.require_gpu("copy")
    xp = backend.xp
    check_divisible("x.size", x.size, 4)
    y = xp.empty_like(x)
    n4 = x.size // 4
    blocks = min(loader.blocks_for(n4, THREADS), 65535 * 8)
    loader.kernel("memory_hierarchy/global.cu", "copy_float4")((blocks,), (THREADS,), (x, y, np.int64(n4)))
    return y


def read_strided(x, n: int, stride: int):
    """out[i] = x[i * stride] for i < n: the same 4 n useful bytes, more sectors as the stride grows."""
    loader.require_gpu("read_strided")
    xp = backend.xp
    check_int("stride", stride, low=1, high=1024)
    check_int("n", n, low=1)
    if (n - 1) * stride >= x.size:
        raise ValueError(f"n must satisfy (n - 1) * stride < x.size = {x.size}; got n={n}, stride={stride}")
    out = xp.empty(n, dtype=xp.float32)
    loader.kernel("memory_hierarchy/global.cu", "read_strided")((loader.blocks_for(n, THREADS),), (THREADS,),
                                                      (x, out, np.int64(n), np.int32(stride)))
    return out


def read_passes(x, passes: int, blocks: int = 132 * 8):
    """Per-thread partial sums of ``passes`` sweeps over ``x``; their total is ``passes * x.sum()``."""
    loader.require_gpu("read_passes")
    xp = backend.xp
    check_int("passes", passes, low=1)
    check_divisible("x.size", x.size, 4)
    out = xp.empty(blocks * THREADS, dtype=xp.float32)
    loader.kernel("memory_hierarchy/global.cu", "read_passes")((blocks,), (THREADS,),
                                                     (x, out, np.int64(x.size // 4), np.int32(passes)))
    return out
