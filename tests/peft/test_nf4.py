"""Do the NF4 code and QLoRA's double quantization behave as the paper says?"""

import numpy as np

from mlsys_lab.peft.nf4 import (
    NF4_BITSANDBYTES,
    double_dequantize,
    double_quantize,
    int4_levels,
    nf4_dequantize,
    nf4_quantize,
    quantization_rmse,
)
from mlsys_lab.training_memory.quantize import nf4_levels


def test_nf4_levels_equal_the_bitsandbytes_table():
    np.testing.assert_allclose(nf4_levels(), NF4_BITSANDBYTES, atol=1e-6)


def test_nf4_beats_uniform_int4_on_normal_weights():
    weights = np.random.default_rng(0).normal(0, 0.02, size=64 * 512)
    assert quantization_rmse(weights, nf4_levels()) < quantization_rmse(weights, int4_levels())


def test_int4_levels_by_hand():
    np.testing.assert_array_equal(int4_levels() * 7, np.arange(-7, 8))


def test_double_quantization_by_hand():
    # constants 1, 2, 3 (mean 2): centred −1, 0, 1 → int8 codes −127, 0, 127 with scale 1/127
    codes, scale, mean = double_quantize(np.array([1.0, 2.0, 3.0], np.float32))
    assert mean == 2.0 and codes.tolist() == [-127, 0, 127]
    np.testing.assert_allclose(double_dequantize(codes, scale, mean), [1.0, 2.0, 3.0], rtol=1e-6)


def test_double_quantization_roundtrip_error_is_small():
    absmax = np.random.default_rng(2).uniform(0.05, 0.1, size=1000).astype(np.float32)
    restored = double_dequantize(*double_quantize(absmax))
    assert np.abs(restored - absmax).max() < 0.03 / 127 * 1.01


def test_nf4_quantize_equals_lesson_06_on_full_blocks_of_float32_values():
    from mlsys_lab.training_memory.quantize import quantize_blockwise

    w = np.random.default_rng(5).normal(0, 0.02, size=64 * 8).astype(np.float32)
    codes, absmax = nf4_quantize(w)
    codes06, absmax06 = quantize_blockwise(w, nf4_levels(), 64)
    np.testing.assert_array_equal(absmax, absmax06)
    assert (codes != codes06).mean() < 0.01  # float32 vs float64 rounding of w / absmax only


def test_nf4_partial_block_zero_block_and_ties_by_hand():
    levels = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    # block 1: absmax 2 -> scaled [1, -0.25 (tie: lower), 0.75 (tie: lower)]; block 2 zeros; block 3 partial
    w = np.array([2.0, -0.5, 1.5, 0.0, 0.0, 0.0, -3.0])
    codes, absmax = nf4_quantize(w, levels, 3)
    assert absmax.tolist() == [2.0, 0.0, 3.0]
    assert codes.tolist() == [4, 1, 3, 2, 2, 2, 0]
    np.testing.assert_array_equal(nf4_dequantize(codes, absmax, levels, 3), [2.0, -1.0, 1.0, 0, 0, 0, -3.0])


def test_nf4_error_is_within_half_the_widest_gap_times_absmax():
    w = np.random.default_rng(6).standard_t(3, size=1000)
    codes, absmax = nf4_quantize(w, block_size=64)
    err = np.abs(nf4_dequantize(codes, absmax, block_size=64) - w)
    assert np.all(err <= np.repeat(absmax, 64)[:1000] * np.diff(nf4_levels()).max() / 2 + 1e-15)


def test_nf4_bad_inputs_name_the_parameter():
    import pytest

    with pytest.raises(ValueError, match="levels"):
        nf4_quantize(np.ones(4), np.array([0.5, -0.5]))
    with pytest.raises(ValueError, match="block_size"):
        nf4_quantize(np.ones(4), block_size=0)
    with pytest.raises(ValueError, match="absmax"):
        nf4_dequantize(np.zeros(130, np.uint8), np.ones(2))
