"""The course's fused bias + GELU + scale kernel (``bias_gelu.cu``) and its NumPy reference.

out = scale · gelu(x + bias), GELU in its tanh form (Hendrycks & Gimpel 2016; :func:`mlsys_lab.nn.gelu`),
x and out (rows, width) float32, bias (width,) added to every row. The launcher takes and returns device
arrays and raises :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend, nn
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_finite, check_int

THREADS = 256
BLOCKS_PER_SM = 32  # a grid-stride grid: enough resident blocks to hide latency, independent of n


def _check(x, bias) -> None:
    check_array("x", x, ndim=2, kinds="f", min_size=0)
    check_array("bias", bias, ndim=1, kinds="f", min_size=0)
    if bias.shape[0] != x.shape[1]:
        raise ValueError(f"bias must have x's width, {x.shape[1]} elements; got shape {tuple(bias.shape)}")


def bias_gelu(x, bias, scale: float):
    """out = scale · gelu(x + bias) with the course's grid-stride kernel; x (rows, width), bias (width,), float32."""
    loader.require_gpu("bias_gelu")
    xp = backend.xp
    _check(x, bias)
    check_finite("scale", scale)
    x = xp.ascontiguousarray(x, dtype=xp.float32)
    bias = xp.ascontiguousarray(bias, dtype=xp.float32)
    out = xp.empty_like(x)
    if x.size == 0:
        return out
    blocks = min(loader.blocks_for(x.size, THREADS), BLOCKS_PER_SM * backend.sm_count())
    loader.kernel("operators/bias_gelu.cu", "bias_gelu")(
        (blocks,), (THREADS,), (x, bias, out, np.float32(scale), np.int64(x.size), np.int32(x.shape[1])))
    return out


def bias_gelu_reference(x: np.ndarray, bias: np.ndarray, scale: float) -> np.ndarray:
    """NumPy float64 reference of :func:`bias_gelu`: scale · gelu(x + bias), returned as float32."""
    x = check_array("x", x, ndim=2, kinds="f", finite=True, min_size=0)
    bias = check_array("bias", bias, ndim=1, kinds="f", finite=True, min_size=0)
    _check(x, bias)
    check_finite("scale", scale)
    v = np.asarray(x, dtype=np.float64) + np.asarray(bias, dtype=np.float64)
    return (scale * nn.gelu(v)).astype(np.float32)


def bias_gelu_bytes(rows: int, width: int) -> int:
    """Bytes a fused bias + GELU must move at least: x read and out written once, bias read once (float32)."""
    check_int("rows", rows, low=0)
    check_int("width", width, low=0)
    return 4 * (2 * rows * width + width)
