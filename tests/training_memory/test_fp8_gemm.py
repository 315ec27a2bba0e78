"""Does the FP8 block-scaled GEMM emulate DeepSeek-V3's promoted accumulation, and does its error bound hold on
every case while staying within 2× of an error that inputs can reach?"""

import numpy as np
import pytest

from mlsys_lab.training_memory.fp8 import BlockScaledFp8, dequantize_fp8_blocks, e4m3_bits, quantize_fp8_blocks
from mlsys_lab.training_memory.fp8_gemm import (
    fp8_block_gemm,
    fp8_gemm_error_bound,
    fp8_gemm_error_coefficient,
    round_mantissa,
)


def _operands(a, b, blocks=((1, 128), (128, 128))):
    qa, qb = quantize_fp8_blocks(a, *blocks[0]), quantize_fp8_blocks(b, *blocks[1])
    return qa, qb, dequantize_fp8_blocks(qa) @ dequantize_fp8_blocks(qb).T


def test_round_mantissa_by_hand():
    """13 bits after the point: 1 + 2⁻¹⁴ is half a step, ties to even → 1; 1 + 3·2⁻¹⁴ → 1 + 2⁻¹² (even);
    3·2⁴⁰ + 2²⁷ is half a step of 2⁴¹⁻¹³ above 3·2⁴⁰ (mantissa 1000…0, even): → 3·2⁴⁰. Truncation drops toward
    zero at every size and sign."""
    x = np.array([1 + 2.0 ** -14, 1 + 3 * 2.0 ** -14, -(1 + 3 * 2.0 ** -14), 0.0, 3 * 2.0 ** 40 + 2.0 ** 27])
    np.testing.assert_array_equal(round_mantissa(x, 13), [1, 1 + 2.0 ** -12, -(1 + 2.0 ** -12), 0, 3 * 2.0 ** 40])
    np.testing.assert_array_equal(round_mantissa(x, 13, "truncate"),
                                  [1, 1 + 2.0 ** -13, -(1 + 2.0 ** -13), 0, 3 * 2.0 ** 40])
    np.testing.assert_array_equal(round_mantissa(np.float32(np.pi), 23), np.float32(np.pi))  # float32 is 23 bits
    assert round_mantissa(2 - 2.0 ** -20, 13, "truncate") == 2 - 2.0 ** -13


def test_exact_accumulation_is_one_fp32_rounding_per_interval():
    """K = 128, scales 1 (amax 448 in each block): C is the float32 rounding of the exact product sum."""
    rng = np.random.default_rng(0)
    a, b = (np.where(rng.random((n, 128)) < 0.5, -1, 1) * rng.choice(np.unique(np.abs(
        dequantize_fp8_blocks(BlockScaledFp8(np.arange(127, dtype=np.uint8)[None], np.ones((1, 1), np.float32),
                                             (1, 128))))), (n, 128)) for n in (5, 7))
    a[:, 0], b[:, 0] = 448, 448
    qa, qb, exact = _operands(a, b)
    assert (qa.scales == 1).all() and (qb.scales == 1).all()
    np.testing.assert_array_equal(fp8_block_gemm(qa, qb, None), exact.astype(np.float32))


def test_promotion_applies_each_intervals_scales():
    """Rows and K groups scaled differently (1 × 128 and 128 × 128 blocks, K = 384, N = 200: a short weight block):
    with a 23-bit inner accumulator C is the float64 product to a few float32 rounding steps."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 384)) * np.array([1e-3, 1.0, 1e3])[np.arange(384) // 128]
    b = rng.standard_normal((200, 384)) * rng.choice([1e-2, 1e2], (200, 1))
    qa, qb, exact = _operands(a, b)
    magnitude = np.abs(dequantize_fp8_blocks(qa)) @ np.abs(dequantize_fp8_blocks(qb)).T
    assert (np.abs(fp8_block_gemm(qa, qb, 23, "nearest") - exact) <= 8 * 2.0 ** -24 * magnitude).all()


@pytest.mark.parametrize("settings", [dict(), dict(inner_rounding="nearest"), dict(inner_mantissa_bits=None),
                                      dict(inner_mantissa_bits=7), dict(inner_mantissa_bits=23)])
def test_the_bound_holds_on_random_cases(settings):
    """Signed, positive and outlier-channel inputs, K a multiple of 128 and not: |C − Â·B̂ᵀ| ≤ bound everywhere."""
    rng = np.random.default_rng(2)
    for m, n, k in ((8, 16, 1024), (3, 130, 300)):
        signed = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        positive = np.abs(signed[0]) + 1, np.abs(signed[1]) + 1
        outliers = signed[0] * np.where(np.arange(k) % 97 == 0, 1e3, 1), signed[1]
        for a, b in (signed, positive, outliers):
            qa, qb, exact = _operands(a, b)
            error = np.abs(fp8_block_gemm(qa, qb, **settings) - exact)
            assert (error <= fp8_gemm_error_bound(qa, qb, **settings)).all()


def test_the_bound_is_within_2x_of_an_error_inputs_reach():
    """Truncation, 13 bits: one product 448·448 = 200704 (ulp of the running sum 2¹⁷⁻¹³ = 16) and 127 products of
    1·15 that truncation drops whole: the error is 127·15 = 1905, and the bound c·(200704 + 1905) with c ≈ 127·2⁻¹³
    is 3.2·10³: reached to more than half."""
    a, b = np.ones((1, 128)), np.full((1, 128), 15.0)
    a[0, 0] = b[0, 0] = 448.0
    qa, qb, exact = _operands(a, b)
    error = float(np.abs(fp8_block_gemm(qa, qb) - exact)[0, 0])
    bound = float(fp8_gemm_error_bound(qa, qb)[0, 0])
    assert error == 127 * 15 and 0.5 < error / bound < 1
    assert bound == pytest.approx(127 * 2.0 ** -13 / (1 - 127 * 2.0 ** -13) * (200704 + 1905), rel=1e-5)


def test_random_signed_data_stays_far_below_the_bound():
    """The bound is a worst case: on random signed data the errors partly cancel. Stated here: the largest error is
    between 1/1000 and 1/20 of the bound (measured about 1/150 for K = 1024, truncation, 13 bits)."""
    rng = np.random.default_rng(4)
    qa, qb, exact = _operands(rng.standard_normal((64, 1024)), rng.standard_normal((128, 1024)))
    ratio = (np.abs(fp8_block_gemm(qa, qb) - exact) / fp8_gemm_error_bound(qa, qb)).max()
    assert 1e-3 < ratio < 0.05


def test_promotion_is_what_keeps_k_4096_accurate():
    """DeepSeek-V3 §3.3.2: without promotion, K = 4096 accumulated in ~14 bits errs by up to about 2%. One scale per
    tensor, so that one interval may span K: at N_c = 4096 the relative error (Frobenius) is ≥ 20× that at
    N_c = 128, and above 1% with truncation."""
    rng = np.random.default_rng(5)
    a, b = np.abs(rng.standard_normal((16, 4096))), np.abs(rng.standard_normal((16, 4096)))
    qa, qb, exact = _operands(a, b, ((16, 4096), (16, 4096)))
    errors = [np.linalg.norm(fp8_block_gemm(qa, qb, promote_interval=n_c) - exact) / np.linalg.norm(exact)
              for n_c in (128, 4096)]
    assert errors[1] > 20 * errors[0] and errors[1] > 0.01


def test_coefficient_by_hand():
    """K = 256, nearest, 13 bits: γ₁₂₇(2⁻¹⁴)(1 + γ₃(2⁻²⁴)) + γ₃(2⁻²⁴) + γ₂₅₆(2⁻⁵³)."""
    def gamma(n, u):
        return n * u / (1 - n * u)
    expected = gamma(127, 2.0 ** -14) * (1 + gamma(3, 2.0 ** -24)) + gamma(3, 2.0 ** -24) + gamma(256, 2.0 ** -53)
    assert fp8_gemm_error_coefficient(256, 13, "nearest") == pytest.approx(expected, rel=1e-15)
    assert fp8_gemm_error_coefficient(100, None) == pytest.approx(2.0 ** -24 * (1 + gamma(2, 2.0 ** -24))
                                                                  + gamma(2, 2.0 ** -24) + gamma(100, 2.0 ** -53))


@pytest.mark.parametrize("call, name", [
    (lambda qa, qb: fp8_block_gemm(qa, qa), "b"),
    (lambda qa, qb: fp8_block_gemm(qa, qb, inner_mantissa_bits=6), "inner_mantissa_bits"),
    (lambda qa, qb: fp8_block_gemm(qa, qb, inner_rounding="up"), "inner_rounding"),
    (lambda qa, qb: fp8_block_gemm(qa, qb, promote_interval=96), "promote_interval"),
    (lambda qa, qb: fp8_gemm_error_bound(np.ones((2, 2)), qb), "a"),
    (lambda qa, qb: round_mantissa([1.0], 53), "mantissa_bits"),
    (lambda qa, qb: fp8_gemm_error_coefficient(0), "k"),
])
def test_bad_input_names_the_parameter(call, name):
    qa = quantize_fp8_blocks(np.ones((2, 256)))
    qb = BlockScaledFp8(e4m3_bits(np.ones((3, 256))), np.ones((1, 2), np.float32), (128, 128))
    if name == "b":
        qa = quantize_fp8_blocks(np.ones((2, 128)))
        qb = quantize_fp8_blocks(np.ones((2, 256)))
        with pytest.raises(ValueError, match=name):
            fp8_block_gemm(qa, qb)
        return
    with pytest.raises((ValueError, TypeError), match=name):
        call(qa, qb)
