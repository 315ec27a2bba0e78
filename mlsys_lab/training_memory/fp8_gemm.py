"""The FP8 block-scaled GEMM of DeepSeek-V3 (§3.3.2), emulated: E4M3 products, a limited-precision accumulator
promoted to FP32 every N_c products, and the error bound a GPU kernel of it is checked with.

    C = A · Bᵀ      A: (M, K) E4M3 with 1 × 128 scales (activations), B: (N, K) with 128 × 128 scales (weights)

For each K interval j of N_c = ``promote_interval`` products (128: one scale of A and one of B cover it):

    P̃_j = Σ_{k in j} a_k · b_k              the codes' values, in the tensor core's accumulator: each running sum
                                             rounded to ``inner_mantissa_bits`` (None: exact, then rounded to FP32)
    C   ← fl32(C + fl32(fl32(sa_j · sb_j) · P̃_j))     promotion on the CUDA cores, in FP32

DeepSeek-V3 (§3.3.2, "Increasing Accumulation Precision"): the FP8 GEMM's accumulation on NVIDIA H800 "is limited to
retaining around 14 bits", and copying the partial results to FP32 registers every N_c = 128 elements (4 WGMMAs)
fixes it. The default here, 13 mantissa bits (a 14-bit significand: sign, 8 exponent, 13 mantissa, the "FP22" of
later measurements), reads those 14 bits as the significand. The rounding of the accumulator is not documented:
``"truncate"`` (toward zero, unit roundoff 2⁻ᵐ) is the default because it bounds ``"nearest"`` (2⁻ᵐ⁻¹) too. Products
of two E4M3 values are exact (4-bit significands), so the emulation runs exactly in float64 but for those roundings.

**The error bound** (:func:`fp8_gemm_error_bound`), against Ĉ = Â·B̂ᵀ of the *dequantized* inputs, elementwise:

    |C − Ĉ| ≤ [ e_in · (1 + γ_{J+1}(u₃₂)) + γ_{J+1}(u₃₂) + γ_K(u₆₄) ] · (|Â| · |B̂|ᵀ)

    γ_n(u) = n·u / (1 − n·u);  J = ⌈K / N_c⌉ intervals;  u₃₂ = 2⁻²⁴, u₆₄ = 2⁻⁵³
    e_in = γ_{N_c − 1}(u_in), u_in = 2⁻ᵐ (truncate) or 2⁻ᵐ⁻¹ (nearest); e_in = u₃₂ for exact accumulation

Derivation (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1 and §4.2): the N_c exact products are
summed with N_c − 1 rounded additions, in any order, so |P̃_j − P_j| ≤ γ_{N_c−1}(u_in) · Σ_{k in j} |a_k b_k|. In the
promotion each term s_j·P̃_j meets the rounding of the scale product, of the product by P̃_j and of at most J − 1
additions (C starts at 0, the first is exact): C = Σ_j s_j P̃_j (1 + θ_j), |θ_j| ≤ γ_{J+1}(u₃₂), with s_j = sa_j·sb_j
exact; a fused multiply-add rounds once less. Since Σ_j s_j Σ_{k in j} |a_k b_k| = (|Â|·|B̂|ᵀ), summing the two
errors gives the first two terms; γ_K(u₆₄) covers computing Ĉ itself in float64. The bound holds for every input;
on random data of both signs the errors partly cancel and stay far below it (the tests state by how much).
"""

from __future__ import annotations

import math

import numpy as np

from mlsys_lab.training_memory.fp8 import E4M3_VALUES, BlockScaledFp8, dequantize_fp8_blocks
from mlsys_lab.validation import check_array, check_choice, check_int, check_type

ROUNDINGS = ("truncate", "nearest")
INNER_MANTISSA_BITS = 13  # DeepSeek-V3 §3.3.2: "around 14 bits" of accumulation precision, read as the significand
UNIT_ROUNDOFF_FP32, UNIT_ROUNDOFF_FP64 = 2.0 ** -24, 2.0 ** -53


def round_mantissa(x, mantissa_bits: int, rounding: str = "nearest") -> np.ndarray:
    """float64 ``x`` rounded to ``mantissa_bits`` stored bits (a significand of mantissa_bits + 1), exponent
    unlimited: "nearest" (ties to even) or "truncate" (toward zero). Exact arithmetic in float64 (bits ≤ 52)."""
    array = np.asarray(check_array("x", x, kinds="fiu", min_size=0, finite=True), dtype=np.float64)
    bits = check_int("mantissa_bits", mantissa_bits, low=0, high=52)
    check_choice("rounding", rounding, ROUNDINGS)
    fraction, exponent = np.frexp(array)                           # x = fraction · 2^exponent, 0.5 <= |fraction| < 1
    scaled = np.ldexp(fraction, bits + 1)                          # an integer part of bits + 1 digits
    return np.asarray(np.ldexp(np.rint(scaled) if rounding == "nearest" else np.trunc(scaled), exponent - bits - 1))


def _check_operands(a, b, inner_mantissa_bits, inner_rounding, promote_interval) -> int:
    """The two operands share K, and each one's scales are constant over every K interval; returns N_c."""
    check_type("a", a, BlockScaledFp8)
    check_type("b", b, BlockScaledFp8)
    k = a.codes.shape[1]
    if b.codes.shape[1] != k:
        raise ValueError(f"b must have a's K = {k} columns (C = A·Bᵀ, B is (N, K)); got shape {b.codes.shape}")
    if inner_mantissa_bits is not None:
        check_int("inner_mantissa_bits", inner_mantissa_bits, low=7, high=23)  # 7: an E4M3 product fits exactly
    check_choice("inner_rounding", inner_rounding, ROUNDINGS)
    n_c = check_int("promote_interval", promote_interval, low=1, high=2 ** 16)  # exact float64 sums up to 2¹⁶ terms
    for name, operand in (("a", a), ("b", b)):
        if operand.block[1] % n_c and operand.block[1] < k:
            raise ValueError(f"promote_interval must divide {name}'s block width {operand.block[1]} (one scale of each "
                             f"operand per interval); got {n_c}")
    return n_c


def fp8_block_gemm(a: BlockScaledFp8, b: BlockScaledFp8, inner_mantissa_bits: int | None = INNER_MANTISSA_BITS,
                   inner_rounding: str = "truncate", promote_interval: int = 128) -> np.ndarray:
    """C = A·Bᵀ (M, N) float32 from block-scaled E4M3 operands, accumulated as the module's docstring says.

    a: (M, K), b: (N, K) (:func:`~.fp8.quantize_fp8_blocks`; DeepSeek-V3's blocks: 1 × 128 and 128 × 128);
    ``inner_mantissa_bits`` None: each interval's partial sum exact, rounded once to FP32.
    """
    n_c = _check_operands(a, b, inner_mantissa_bits, inner_rounding, promote_interval)
    a_values = E4M3_VALUES[a.codes].astype(np.float64)                   # (M, K), the codes' values, unscaled
    b_values = E4M3_VALUES[b.codes].astype(np.float64)                   # (N, K)
    (m, k), n = a.codes.shape, b.codes.shape[0]
    a_rows, b_rows = np.arange(m) // a.block[0], np.arange(n) // b.block[0]
    c = np.zeros((m, n), dtype=np.float32)
    for start in range(0, k, n_c):
        stop = min(start + n_c, k)
        if inner_mantissa_bits is None:
            partial = a_values[:, start:stop] @ b_values[:, start:stop].T     # exact: < 53 bits of range in all
        else:
            partial = np.zeros((m, n))
            for kk in range(start, stop):                                    # the tensor core's running sum
                partial = round_mantissa(partial + np.outer(a_values[:, kk], b_values[:, kk]), inner_mantissa_bits,
                                         inner_rounding)
        sa = a.scales[a_rows, start // a.block[1]].astype(np.float32)        # (M,)
        sb = b.scales[b_rows, start // b.block[1]].astype(np.float32)        # (N,)
        scale = np.multiply.outer(sa, sb)                                    # float32: rounded once
        c = c + scale * partial.astype(np.float32)                           # float32 product, float32 sum
    return c


def _gamma(n: int, u: float) -> float:
    """γ_n(u) = n·u / (1 − n·u): the relative error bound of n roundings of unit roundoff u (Higham, §3.1)."""
    if n * u >= 1:
        raise ValueError(f"the bound needs n·u < 1; got n = {n}, u = {u:g}")
    return n * u / (1 - n * u)


def fp8_gemm_error_coefficient(k: int, inner_mantissa_bits: int | None = INNER_MANTISSA_BITS,
                               inner_rounding: str = "truncate", promote_interval: int = 128) -> float:
    """The factor c of the bound |C − Ĉ| ≤ c · (|Â|·|B̂|ᵀ) for a K of ``k`` (the module's docstring)."""
    k = check_int("k", k, low=1, high=2 ** 30)
    n_c = check_int("promote_interval", promote_interval, low=1, high=2 ** 16)
    check_choice("inner_rounding", inner_rounding, ROUNDINGS)
    if inner_mantissa_bits is None:
        inner = UNIT_ROUNDOFF_FP32
    else:
        bits = check_int("inner_mantissa_bits", inner_mantissa_bits, low=7, high=23)
        inner = _gamma(min(n_c, k) - 1, 2.0 ** -(bits + (inner_rounding == "nearest")))
    outer = _gamma(math.ceil(k / n_c) + 1, UNIT_ROUNDOFF_FP32)
    return inner * (1 + outer) + outer + _gamma(k, UNIT_ROUNDOFF_FP64)


def fp8_gemm_error_bound(a: BlockScaledFp8, b: BlockScaledFp8,
                         inner_mantissa_bits: int | None = INNER_MANTISSA_BITS, inner_rounding: str = "truncate",
                         promote_interval: int = 128) -> np.ndarray:
    """Elementwise bound (M, N) on |C − Â·B̂ᵀ| for :func:`fp8_block_gemm` with these settings, or for a kernel
    whose accumulator is no worse: :func:`fp8_gemm_error_coefficient` × (|Â|·|B̂|ᵀ), in float64."""
    _check_operands(a, b, inner_mantissa_bits, inner_rounding, promote_interval)
    coefficient = fp8_gemm_error_coefficient(a.codes.shape[1], inner_mantissa_bits, inner_rounding, promote_interval)
    magnitude = np.abs(dequantize_fp8_blocks(a)) @ np.abs(dequantize_fp8_blocks(b)).T
    return coefficient * magnitude * (1 + _gamma(a.codes.shape[1], UNIT_ROUNDOFF_FP64))  # |Â|·|B̂|ᵀ's own rounding
