"""NF4 storage as QLoRA keeps it: 4-bit codes, block-wise absmax constants, and those constants in 8 bits.

The NF4 levels and the block-wise quantizer that keeps codes and constants apart come from lesson 06,
:mod:`mlsys_lab.training_memory.quantize` (``nf4_levels``, ``quantize_blockwise``,
``dequantize_blockwise``); this module adds what QLoRA does on top: double quantization of the
constants, the uniform INT4 code to compare with, and the bitsandbytes table as an independent check.

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

from mlsys_lab.training_memory.quantize import dequantize_blockwise, quantize_blockwise
from mlsys_lab.validation import check_int

# The bitsandbytes table (functional.py, create_normal_map) that QLoRA ships: an independent check.
NF4_BITSANDBYTES = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0])


def int4_levels() -> np.ndarray:
    """The symmetric uniform 4-bit code scaled to [-1, 1]: k/7 for k = -7..7 (15 levels used)."""
    return np.arange(-7, 8) / 7.0


def double_quantize(absmax: np.ndarray, block_size2: int = 256) -> tuple[np.ndarray, np.ndarray, float]:
    """Quantize the absmax constants to int8, per block of ``block_size2``, after subtracting their mean.

    Returns (int8 codes, one fp32 scale per block, the fp32 mean): 8 bits per constant + 32 per block.
    """
    check_int("block_size2", block_size2, low=1)
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
    pad = (-codes.size) % block_size2
    blocks = np.concatenate([codes.astype(np.float32), np.zeros(pad, np.float32)]).reshape(-1, block_size2)
    return ((blocks * scale[:, None]).reshape(-1)[:codes.size] + mean).astype(np.float32)


def quantization_rmse(weights: np.ndarray, levels: np.ndarray, block_size: int = 64,
                      double_quant: bool = False) -> float:
    """Root-mean-square error of quantizing then dequantizing ``weights``."""
    codes, absmax = quantize_blockwise(weights, levels, block_size)
    if double_quant:
        absmax = double_dequantize(*double_quantize(absmax))
    restored = dequantize_blockwise(codes, absmax, levels)
    return float(np.sqrt(np.mean((restored - np.asarray(weights, np.float32).reshape(-1)) ** 2)))
