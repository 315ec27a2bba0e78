"""NF4 storage as QLoRA keeps it: 4-bit codes, block-wise absmax constants, and those constants in 8 bits.

The NF4 levels and the block-wise quantizer that keeps codes and constants apart come from lesson 06,
:mod:`mlsys_lab.training_memory.quantize` (``nf4_levels``, ``quantize_blockwise``,
``dequantize_blockwise``, whole blocks, float32); this module adds what QLoRA does on top: a quantizer
for any length (a partial last block, float64 so that ties are ties: :func:`nf4_quantize`), double
quantization of the constants, the uniform INT4 code to compare with, and the bitsandbytes table as an
independent check.

QLoRA (Dettmers et al. 2023, Section 3) builds a 16-value code whose levels are quantiles of a
standard normal, so that each level is used about equally often by normally distributed weights.
Its asymmetric construction has an exact zero: 8 positive quantiles, 7 negative, and 0, scaled to
[-1, 1]. A weight tensor is cut into blocks of 64; each block is divided by its absmax and every
value replaced by the index (4 bits) of the nearest level. Double quantization stores the fp32 absmax
constants themselves in 8 bits per block of 256 (the paper uses FP8; here symmetric int8 after
subtracting their mean, the same 8 bits per constant).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.training_memory.quantize import dequantize_blockwise, nf4_levels, quantize_blockwise
from mlsys_lab.validation import check_array, check_bool, check_finite, check_int

# The bitsandbytes table (functional.py, create_normal_map) that QLoRA ships: an independent check.
NF4_BITSANDBYTES = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0])


def int4_levels() -> np.ndarray:
    """The symmetric uniform 4-bit code scaled to [-1, 1]: k/7 for k = -7..7 (15 levels used)."""
    return np.arange(-7, 8) / 7.0


def nf4_quantize(weights: np.ndarray, levels: np.ndarray | None = None,
                 block_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Block-wise absmax quantization of any number of weights: (codes (n,) uint8, absmax (n_blocks,) float64).

    The weights, flattened, are cut into blocks of ``block_size`` (the last block may be shorter: it has
    its own absmax); each block is divided by max|w| of the block and each value replaced by the index of
    the nearest of ``levels`` (sorted, in [-1, 1]; NF4's 16 by default). A value exactly halfway between two
    levels takes the lower one (bitsandbytes' comparisons are strict ``>``); a block of zeros has absmax 0
    and every code at the level 0. Computed in float64, so ties are ties. Error bound: a value is off by at
    most absmax · (widest gap between adjacent levels) / 2.
    """
    flat = np.asarray(check_array("weights", weights, kinds="fiu", finite=True), dtype=np.float64).reshape(-1)
    levels = nf4_levels() if levels is None else np.asarray(check_array("levels", levels, ndim=1, finite=True),
                                                             dtype=np.float64)
    if levels.size < 2 or np.any(np.diff(levels) <= 0) or levels[0] < -1 or levels[-1] > 1:
        raise ValueError("levels must be at least 2 increasing values in [-1, 1]")
    block_size = check_int("block_size", block_size, low=1, high=2**31)
    starts = np.arange(0, flat.size, block_size)
    absmax = np.maximum.reduceat(np.abs(flat), starts)                     # (n_blocks,)
    per_value = np.repeat(absmax, block_size)[:flat.size]
    scaled = flat / np.where(per_value == 0, 1.0, per_value)              # in [-1, 1]
    midpoints = (levels[1:] + levels[:-1]) / 2
    codes = np.searchsorted(midpoints, scaled, side="left")               # a tie goes to the lower level
    return codes.astype(np.uint8), absmax


def nf4_dequantize(codes: np.ndarray, absmax: np.ndarray, levels: np.ndarray | None = None,
                   block_size: int = 64) -> np.ndarray:
    """Inverse of :func:`nf4_quantize`: levels[code] · absmax of the code's block, flat float64."""
    codes = np.asarray(check_array("codes", codes, kinds="iu", ndim=1), dtype=np.int64)
    absmax = np.asarray(check_array("absmax", absmax, ndim=1, finite=True), dtype=np.float64)
    levels = nf4_levels() if levels is None else np.asarray(check_array("levels", levels, ndim=1, finite=True),
                                                             dtype=np.float64)
    block_size = check_int("block_size", block_size, low=1, high=2**31)
    if absmax.size != -(-codes.size // block_size):
        raise ValueError(f"absmax must hold one value per block of block_size={block_size} codes "
                         f"({-(-codes.size // block_size)}); got {absmax.size}")
    if codes.max() >= levels.size:
        raise ValueError(f"codes must index the {levels.size} levels; got {codes.max()}")
    return levels[codes] * np.repeat(absmax, block_size)[:codes.size]


def double_quantize(absmax: np.ndarray, block_size2: int = 256) -> tuple[np.ndarray, np.ndarray, float]:
    """Quantize the absmax constants to int8, per block of ``block_size2``, after subtracting their mean.

    Returns (int8 codes, one fp32 scale per block, the fp32 mean): 8 bits per constant + 32 per block.
    """
    check_int("block_size2", block_size2, low=1, high=2**20)
    absmax = check_array("absmax", absmax, ndim=1, kinds="f", finite=True)
    if (absmax < 0).any():
        raise ValueError(f"absmax must be >= 0 (block maxima of |w|); got {absmax.min():g}")
    mean = float(absmax.mean())
    centered = absmax - mean
    pad = (-centered.size) % block_size2
    blocks = np.concatenate([centered, np.zeros(pad, np.float32)]).reshape(-1, block_size2)
    scale = np.abs(blocks).max(axis=1) / 127.0
    codes = np.round(blocks / np.where(scale == 0, 1.0, scale)[:, None]).astype(np.int8)
    return codes.reshape(-1)[:absmax.size], scale.astype(np.float32), mean


def double_dequantize(codes: np.ndarray, scale: np.ndarray, mean: float,
                      block_size2: int = 256) -> np.ndarray:
    """Inverse of :func:`double_quantize`."""
    codes = check_array("codes", codes, ndim=1, kinds="iu", min_size=0)
    block_size2 = check_int("block_size2", block_size2, low=1, high=2**20)
    n_blocks = -(-codes.size // block_size2)
    scale = check_array("scale", scale, ndim=1, finite=True, min_size=0)
    if scale.shape != (n_blocks,) or (scale < 0).any():
        raise ValueError(f"scale must hold one value >= 0 per block of block_size2={block_size2} codes "
                         f"({n_blocks}); got shape {scale.shape}")
    check_finite("mean", mean, low=0.0)
    pad = (-codes.size) % block_size2
    blocks = np.concatenate([codes.astype(np.float32), np.zeros(pad, np.float32)]).reshape(-1, block_size2)
    return ((blocks * scale[:, None]).reshape(-1)[:codes.size] + mean).astype(np.float32)


def quantization_rmse(weights: np.ndarray, levels: np.ndarray, block_size: int = 64,
                      double_quant: bool = False) -> float:
    """Root-mean-square error of quantizing then dequantizing ``weights``."""
    check_bool("double_quant", double_quant)
    codes, absmax = quantize_blockwise(weights, levels, block_size)
    if double_quant:
        absmax = double_dequantize(*double_quantize(absmax))
    restored = dequantize_blockwise(codes, absmax, levels)
    return float(np.sqrt(np.mean((restored - np.asarray(weights, np.float32).reshape(-1)) ** 2)))
