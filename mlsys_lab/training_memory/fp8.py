"""FP8 E4M3 with fine-grained scales (DeepSeek-V3, §3.3.1): rounding, per-block quantization, dequantization.

Rounding to E4M3 (OCP OFP8 v1.0, :data:`~.mixed_precision.FP8_E4M3`): round to nearest over the 253 finite
values, ties to the even code (the one whose mantissa ends in 0); magnitudes above 448 (and ±inf) *saturate* to
±448, as Hopper's ``cvt.rn.satfinite.e4m3x2.f32`` does; NaN stays NaN (code 0x7F, or 0xFF with the sign). The
search is vectorised over the sorted table of the 127 non-negative codes (``np.searchsorted``), no loop over
elements: code order is value order, so "even code" is "even index".

Per-block scaling: a tensor x (rows, cols) is cut into blocks of ``block_rows × block_cols`` (a last block may be
short), each with its own fp32 scale

    scale = amax / 448           (amax: the block's largest |x|; a block of zeros gets scale 1, its codes all 0)
    code  = e4m3(x / scale)      (float32 division, then the rounding above: the block's largest lands on ±448)
    x̂     = value(code) · scale  (dequantized: exact in float64, a 4-bit significand times a 24-bit one)

DeepSeek-V3 scales activations per 1 × 128 (a token's row, 128 channels at a time) and weights per 128 × 128
block, so that an outlier channel costs the precision of its own 128 values only, not of the whole tensor. E4M3
keeps 3 mantissa bits anywhere in its range: a scale set by an outlier hurts the other values only where it pushes
them below the smallest normal, 2⁻⁶ (about 448 / 2¹⁵ of the block's amax), where precision falls off; an
outlier 100× a tensor's spread leaves them still normal, one 10⁴× pushes most of them into subnormals
(:func:`outlier_activations`, and the lesson's table of both).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from mlsys_lab.training_memory.mixed_precision import FP8_E4M3
from mlsys_lab.validation import check_array, check_int, check_number

E4M3_MAX = FP8_E4M3.max  # 448
E4M3_VALUES = np.array([FP8_E4M3.decode(code) for code in range(256)], dtype=np.float32)  # value of each code
_POSITIVE = E4M3_VALUES[:127].astype(np.float64)  # codes 0x00..0x7E: 0, the subnormals, the normals up to 448
_NAN_CODE = 0x7F


def e4m3_bits(x) -> np.ndarray:
    """uint8 E4M3 codes of ``x`` (any float or integer array): nearest value, ties to even, saturating at ±448,
    NaN kept. Same shape as ``x``."""
    array = np.asarray(check_array("x", x, kinds="fiu", min_size=0), dtype=np.float64)
    magnitude = np.abs(array)
    below = np.clip(np.searchsorted(_POSITIVE, magnitude, side="right") - 1, 0, 126)  # _POSITIVE[below] <= |x|
    above = np.minimum(below + 1, 126)
    to_low, to_high = magnitude - _POSITIVE[below], _POSITIVE[above] - magnitude
    round_up = (below < 126) & ((to_high < to_low) | ((to_high == to_low) & (below % 2 == 1)))
    code = np.where(np.isnan(array), _NAN_CODE, below + round_up)  # |x| >= 448 (and inf): below = 126, saturated
    return np.asarray(code | (np.signbit(array).astype(np.int64) << 7)).astype(np.uint8)


def round_to_e4m3(x) -> np.ndarray:
    """``x`` rounded to E4M3 (:func:`e4m3_bits`), as float32 values of the same shape."""
    return np.asarray(E4M3_VALUES[e4m3_bits(x)])


@dataclasses.dataclass(frozen=True)
class BlockScaledFp8:
    """A 2-D tensor as E4M3 codes and one fp32 scale per ``block`` = (rows, cols) block: x ≈ value(codes) · scale."""

    codes: np.ndarray  # uint8 (rows, cols)
    scales: np.ndarray  # float32 (ceil(rows / block rows), ceil(cols / block cols)), each > 0
    block: tuple[int, int]

    def __post_init__(self) -> None:
        rows, cols = check_array("codes", self.codes, ndim=2, kinds="u").shape
        if self.codes.dtype != np.uint8:
            raise TypeError(f"codes must be uint8 E4M3 bit patterns; got dtype {self.codes.dtype}")
        if not isinstance(self.block, tuple) or len(self.block) != 2:
            raise ValueError(f"block must be a (rows, cols) tuple; got {self.block!r:.60}")
        block_rows = check_int("block rows", self.block[0], low=1)
        block_cols = check_int("block cols", self.block[1], low=1)
        grid = (-(-rows // block_rows), -(-cols // block_cols))
        scales = check_array("scales", self.scales, kinds="f", shape=grid, finite=True)
        if not (scales > 0).all():
            raise ValueError(f"scales must all be > 0; got {float(scales.min()):g}")


def quantize_fp8_blocks(x, block_rows: int = 1, block_cols: int = 128) -> BlockScaledFp8:
    """E4M3 codes and fp32 scales of ``x`` (rows, cols), one scale per ``block_rows × block_cols`` block (the
    module's docstring). DeepSeek-V3: activations (1, 128), weights (128, 128); one scale per tensor: the shape."""
    x32 = np.asarray(check_array("x", x, ndim=2, kinds="fiu", finite=True), dtype=np.float32)
    rows, cols = x32.shape
    # a block larger than the tensor is the whole tensor: one scale
    br = min(check_int("block_rows", block_rows, low=1), rows)
    bc = min(check_int("block_cols", block_cols, low=1), cols)
    grid = (-(-rows // br), -(-cols // bc))
    padded = np.zeros((grid[0] * br, grid[1] * bc), dtype=np.float32)
    padded[:rows, :cols] = np.abs(x32)
    amax = padded.reshape(grid[0], br, grid[1], bc).max(axis=(1, 3))                    # (grid rows, grid cols)
    scales = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    full = np.repeat(np.repeat(scales, br, axis=0), bc, axis=1)[:rows, :cols]
    return BlockScaledFp8(e4m3_bits(x32 / full), scales, (br, bc))


def dequantize_fp8_blocks(q: BlockScaledFp8) -> np.ndarray:
    """value(codes) · scale of each block, float64 (rows, cols): exact, no rounding."""
    if not isinstance(q, BlockScaledFp8):
        raise TypeError(f"q must be a BlockScaledFp8; got {type(q).__name__}")
    rows, cols = q.codes.shape
    full = np.repeat(np.repeat(q.scales.astype(np.float64), q.block[0], axis=0), q.block[1], axis=1)
    return E4M3_VALUES[q.codes].astype(np.float64) * full[:rows, :cols]


def outlier_activations(rows: int, cols: int, n_outliers: int, factor: float, seed: int = 0) -> np.ndarray:
    """float32 (rows, cols) standard-normal activations whose first ``n_outliers`` channels of the first 128-column
    group are ``factor`` × larger: the outlier channels LLM activations show (Dettmers et al. 2022, LLM.int8())."""
    rows, cols = check_int("rows", rows, low=1, high=2 ** 16), check_int("cols", cols, low=1, high=2 ** 16)
    n_outliers = check_int("n_outliers", n_outliers, low=0, high=min(cols, 128))
    factor = check_number("factor", factor, low=1.0, high=1e30)
    x = np.random.default_rng(check_int("seed", seed, low=0)).standard_normal((rows, cols))
    x[:, :n_outliers] *= factor
    return x.astype(np.float32)


def fp8_quantization_error(x, block_rows: int, block_cols: int, outlier_columns: int = 0) -> float:
    """Relative error ‖x̂ − x‖ / ‖x‖ (Frobenius) of ``x`` quantized per block and dequantized, over the columns
    from ``outlier_columns`` on (0: the whole tensor): what the ordinary channels lose beside an outlier."""
    x32 = np.asarray(check_array("x", x, ndim=2, kinds="fiu", finite=True), dtype=np.float32)
    start = check_int("outlier_columns", outlier_columns, low=0, high=x32.shape[1] - 1)
    error = dequantize_fp8_blocks(quantize_fp8_blocks(x32, block_rows, block_cols))[:, start:] - x32[:, start:]
    norm = math.sqrt(float(np.sum(x32[:, start:].astype(np.float64) ** 2)))
    return math.sqrt(float(np.sum(error ** 2))) / norm if norm else 0.0
