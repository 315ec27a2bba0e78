"""Constant memory: a polynomial whose coefficients every lane reads at the same address (broadcast) or at
32 different ones (serialized), against the same reads from global memory (``constant.cu``).

Launchers take and return device arrays and raise :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU;
:func:`poly_reference` is the NumPy version.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import THREADS
from mlsys_lab.validation import check_array, check_choice, check_int

N_COEFFS = 64  # matches memory_hierarchy/constant.cu


def poly(x, coeffs, spread: int, space: str = "constant"):
    """Horner evaluation of ``N_COEFFS`` coefficients, with lane L starting at coefficient L * spread.

    ``space`` "constant" reads ``__constant__`` memory, "global" the same values from an array.
    """
    loader.require_gpu("poly")
    xp = backend.xp
    check_int("spread", spread, low=0, high=1)
    check_choice("space", space, ("constant", "global"))
    if coeffs.size != N_COEFFS:
        raise ValueError(f"coeffs must have {N_COEFFS} values; got {coeffs.size}")
    out = xp.empty_like(x)
    grid = (loader.blocks_for(x.size, THREADS),)
    if space == "constant":
        mod = loader.module("memory_hierarchy/constant.cu")
        symbol = mod.get_global("const_coeffs")
        xp.ndarray((N_COEFFS,), xp.float32, symbol)[...] = coeffs
        mod.get_function("poly_constant")(grid, (THREADS,), (x, out, np.int64(x.size), np.int32(spread)))
    else:
        fn = loader.kernel("memory_hierarchy/constant.cu", "poly_global")
        fn(grid, (THREADS,), (x, coeffs, out, np.int64(x.size), np.int32(spread)))
    return out


def poly_reference(x: np.ndarray, coeffs: np.ndarray, spread: int,
                   threads_per_block: int = THREADS) -> np.ndarray:
    """NumPy version of :func:`poly`: lane = (i % threads_per_block) % 32."""
    x = check_array("x", x, ndim=1, kinds="f", finite=True)
    check_array("coeffs", coeffs, ndim=1, kinds="f", shape=(N_COEFFS,))
    check_int("spread", spread, low=0, high=1 << 20)
    check_int("threads_per_block", threads_per_block, low=1, high=1024)
    x = np.asarray(x, dtype=np.float32)
    shift = ((np.arange(x.size) % threads_per_block) % 32) * spread
    acc = np.zeros_like(x)
    for k in range(N_COEFFS):
        acc = acc * x + coeffs[(k + shift) % N_COEFFS]
    return acc
