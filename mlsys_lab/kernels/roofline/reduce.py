"""The course's full reduction (``reduce.cu``): sum(x) of float32 with warp shuffles and one atomicAdd per block.

The launcher takes a device array and returns a one-element device array; it raises
:class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU. The NumPy reference sums in float64.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array

THREADS = 256
BLOCKS_PER_SM = 8  # one atomic per block: a few thousand atomics in all, whatever n is


def sum_atomic(x):
    """sum(x) of a 1-D float32 array as a one-element float32 device array, in one kernel (one atomicAdd per block)."""
    loader.require_gpu("sum_atomic")
    xp = backend.xp
    check_array("x", x, ndim=1, kinds="f", min_size=0)
    x = xp.ascontiguousarray(x, dtype=xp.float32)
    out = xp.zeros(1, dtype=xp.float32)
    if x.size == 0:
        return out
    blocks = min(loader.blocks_for(x.size, THREADS), BLOCKS_PER_SM * backend.sm_count())
    loader.kernel("roofline/reduce.cu", "reduce_sum")((blocks,), (THREADS,), (x, out, np.int64(x.size)))
    return out


def sum_reference(x: np.ndarray) -> float:
    """sum(x) of a 1-D float array, in float64 (the exact sum the float32 kernels approach)."""
    x = check_array("x", x, ndim=1, kinds="f", finite=True, min_size=0)
    return float(np.sum(np.asarray(x, dtype=np.float64)))
