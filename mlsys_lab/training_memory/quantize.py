"""Quantization (量化): integers plus scales in place of floats, and what it costs in error.

A b-bit quantizer maps w to an integer code q and back:

    symmetric:   scale = max|w| / (2^(b−1) − 1),      q = round(w / scale),            ŵ = scale·q
    asymmetric:  scale = (max w − min w) / (2^b − 1), q = round(w / scale) + zero,     ŵ = scale·(q − zero)

One scale per tensor, per output channel (row), or per group of ``group_size`` consecutive weights
along a row: finer groups follow the data better and cost one more 16-bit scale per group.
NF4 (QLoRA, Dettmers et al. 2023) keeps 4-bit codes but puts the 16 levels at quantiles of a normal
distribution, since trained weights are roughly normal, with one absmax per block of 64.
Arrays are NumPy here: quantization is a data transformation done once, on the host. The int8
weight-only matmul that runs on such weights is a kernel, :mod:`mlsys_lab.kernels.training_memory.int8_matmul`.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_type,
    relative_error,
)

SCHEMES = ("symmetric", "asymmetric")
GRANULARITIES = ("tensor", "channel", "group")
SCALE_BYTES = 2  # scales and zero points stored as fp16


@dataclass(frozen=True)
class Quantized:
    """Integer codes (stored in int16 for simplicity; ``bits`` says what they need) and their scales."""

    codes: np.ndarray  # shape of the weight
    scales: np.ndarray  # one per group: shape (rows, n_groups) broadcast over the group
    zero_points: np.ndarray | None
    bits: int
    group_size: int  # columns per scale (the row length for per-channel, everything for per-tensor)

    def __post_init__(self) -> None:
        codes = check_array("codes", self.codes, ndim=2, kinds="iu", min_size=0)
        scales = check_array("scales", self.scales, ndim=2, kinds="f", finite=True, min_size=0)
        if np.any(scales < 0):
            raise ValueError("scales must be >= 0 (a step size per group)")
        check_int("bits", self.bits, low=2, high=16)
        group_size = check_int("group_size", self.group_size, low=1, high=max(1, codes.size))
        # codes (rows, cols) are read as (scales rows, n_groups, group_size): the three must agree
        if scales.size * group_size != codes.size or (scales.size and codes.shape[0] % scales.shape[0]):
            raise ValueError(f"scales must hold one scale per group of group_size={group_size} codes: codes of shape "
                             f"{codes.shape} need {codes.size // group_size} scale(s) whose rows divide "
                             f"{codes.shape[0]}; got scales of shape {scales.shape}")
        if self.zero_points is not None:  # one per scale
            check_array("zero_points", self.zero_points, kinds="fiu", finite=True, min_size=0, shape=scales.shape)

    @property
    def storage_bytes(self) -> float:
        """bits/8 per weight + 2 bytes per scale (+ 2 per zero point)."""
        n_scales = self.scales.size * (2 if self.zero_points is not None else 1)
        return self.codes.size * self.bits / 8 + n_scales * SCALE_BYTES


def _grouped(w: np.ndarray, granularity: str, group_size: int) -> tuple[np.ndarray, int]:
    """w (rows, cols) viewed as (rows, n_groups, group) with the group length used."""
    rows, cols = w.shape
    if granularity == "tensor":
        return w.reshape(1, 1, rows * cols), rows * cols
    if granularity == "channel":
        return w.reshape(rows, 1, cols), cols
    if cols % group_size:
        raise ValueError(f"group_size must divide the number of columns {cols}; got {group_size}")
    return w.reshape(rows, cols // group_size, group_size), group_size


def quantize(w: np.ndarray, bits: int = 8, scheme: str = "symmetric", granularity: str = "channel",
             group_size: int = 128) -> Quantized:
    """Round-to-nearest quantization of a 2-D weight (rows = output channels). See the module doc."""
    w = np.asarray(check_array("w", w, finite=True), dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"w must be a 2-D array (rows, cols); got shape {w.shape}")
    bits = check_int("bits", bits, low=2, high=16)
    check_choice("scheme", scheme, SCHEMES)
    check_choice("granularity", granularity, GRANULARITIES)
    group_size = check_int("group_size", group_size, low=1)
    groups, used = _grouped(w, granularity, group_size)
    if scheme == "symmetric":
        q_max = 2 ** (bits - 1) - 1
        scale = np.abs(groups).max(axis=2, keepdims=True) / q_max
        scale = np.where(scale == 0, 1.0, scale)
        codes = np.clip(np.round(groups / scale), -q_max, q_max)
        zero = None
    else:
        q_max = 2 ** bits - 1
        low, high = groups.min(axis=2, keepdims=True), groups.max(axis=2, keepdims=True)
        scale = np.where(high > low, (high - low) / q_max, 1.0)
        zero = np.round(-low / scale)
        codes = np.clip(np.round(groups / scale) + zero, 0, q_max)
    return Quantized(codes.astype(np.int16).reshape(w.shape), scale[..., 0].astype(np.float32),
                     None if zero is None else zero[..., 0].astype(np.float32), bits, used)


def dequantize(q: Quantized) -> np.ndarray:
    """ŵ = scale·(q − zero), float32, the weight's shape."""
    check_type("q", q, Quantized)
    rows = q.scales.shape[0]
    codes = q.codes.reshape(rows, -1, q.group_size).astype(np.float32)
    if q.zero_points is not None:
        codes = codes - q.zero_points[..., None]
    return (codes * q.scales[..., None]).reshape(q.codes.shape)


# --- NF4 ---------------------------------------------------------------------------------------

NF4_OFFSET = 0.9677083  # bitsandbytes' create_normal_map: the outermost quantile used


def nf4_levels(offset: float = NF4_OFFSET) -> np.ndarray:
    """The 16 NF4 levels in [−1, 1] (QLoRA §3, bitsandbytes ``create_normal_map``).

    8 positive levels at normal quantiles of linspace(offset, 0.5, 9)[:-1], 7 negative ones at
    linspace(offset, 0.5, 8)[:-1], and an exact zero; then divided by the largest magnitude.
    """
    check_number("offset", offset, low=0.5, high=1.0, low_inclusive=False, high_inclusive=False)  # a quantile
    ppf = NormalDist().inv_cdf
    positive = [ppf(p) for p in np.linspace(offset, 0.5, 9)[:-1]]
    negative = [-ppf(p) for p in np.linspace(offset, 0.5, 8)[:-1]]
    levels = np.sort(np.array(positive + [0.0] + negative))
    return levels / np.abs(levels).max()


def quantize_blockwise(weights: np.ndarray, levels: np.ndarray,
                       block_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Block-wise absmax quantization of the weights, flattened, to the nearest of ``levels`` (a code in [−1, 1]).

    Each block of ``block_size`` weights is divided by its absmax and every value replaced by the
    index of the nearest level. Returns (codes as uint8 indices into ``levels``, one fp32 absmax per
    block). ``weights.size`` must be a multiple of ``block_size``.
    """
    check_array("weights", weights, kinds="f")
    check_array("levels", levels, ndim=1, kinds="f", finite=True)
    check_int("block_size", block_size, low=1)
    flat = np.asarray(weights, dtype=np.float32).reshape(-1)
    if flat.size % block_size:
        raise ValueError(f"weights.size must be a multiple of block_size={block_size}; got {flat.size}")
    blocks = flat.reshape(-1, block_size)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    scaled = blocks / np.where(absmax == 0, 1.0, absmax)[:, None]
    # nearest level: search the midpoints between sorted levels
    midpoints = (levels[1:] + levels[:-1]) / 2
    codes = np.searchsorted(midpoints, scaled).astype(np.uint8)
    return codes.reshape(-1), absmax


def dequantize_blockwise(codes: np.ndarray, absmax: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Inverse of :func:`quantize_blockwise`: levels[code] · absmax of the code's block, flat float32."""
    codes = check_array("codes", codes, kinds="iu")
    absmax = check_array("absmax", absmax, ndim=1, kinds="f", finite=True)
    levels = check_array("levels", levels, ndim=1, kinds="f")
    if codes.size % absmax.size:
        raise ValueError(f"absmax must hold one scale per block of codes; got {absmax.size} for {codes.size} codes")
    if codes.size and int(codes.max()) >= levels.size:
        raise ValueError(f"levels must hold every code; got {levels.size} levels for codes up to {int(codes.max())}")
    block_size = codes.size // absmax.size
    return (levels[codes].reshape(-1, block_size) * absmax[:, None]).reshape(-1).astype(np.float32)


def nf4_quantize_dequantize(w: np.ndarray, block_size: int = 64) -> np.ndarray:
    """Per block of ``block_size`` weights: divide by the absmax, snap to the nearest NF4 level, rescale."""
    w = np.asarray(check_array("w", w, finite=True), dtype=np.float32)
    if w.size % check_int("block_size", block_size, low=1):
        raise ValueError(f"w.size must be a multiple of block_size={block_size}; got {w.size}")
    levels = nf4_levels().astype(np.float32)
    return dequantize_blockwise(*quantize_blockwise(w, levels, block_size), levels).reshape(w.shape)


def nf4_bits_per_param(block_size: int = 64, double_quant: bool = True, second_block: int = 256) -> float:
    """4 bits + absmax overhead: 32/64 = 0.5 bits, or 8/64 + 32/(64·256) ≈ 0.127 with double quantization."""
    check_int("block_size", block_size, low=1)
    if not check_bool("double_quant", double_quant):
        return 4 + 32 / block_size
    return 4 + 8 / block_size + 32 / (block_size * check_int("second_block", second_block, low=1))


# --- weight-only vs weight + activation --------------------------------------------------------

def quantized_matmul_error(x: np.ndarray, w: np.ndarray, bits: int = 8, activations: bool = False,
                           group_size: int = 128) -> float:
    """Relative error of x @ Ŵᵀ against x @ Wᵀ; x (batch, in), w (out, in).

    Weight-only: W per output channel, x kept in float (the saving is memory traffic: weights are
    read at bits/8 bytes each and dequantized in the kernel). Weight + activation: x is also
    quantized, per token (row), so the matmul itself can run on integer units.
    """
    check_bool("activations", activations)
    x = np.asarray(check_array("x", x, ndim=2, finite=True))
    w = np.asarray(check_array("w", w, ndim=2, finite=True))
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"x (batch, in) and w (out, in) must share in; got x {x.shape} and w {w.shape}")
    w_hat = dequantize(quantize(w, bits, "symmetric", "channel", group_size))
    x_hat = dequantize(quantize(x, bits, "symmetric", "channel", group_size)) if activations else x
    return relative_error(x_hat @ w_hat.T, x @ w.T)
