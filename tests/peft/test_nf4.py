"""Do the NF4 code and QLoRA's double quantization behave as the paper says?"""

import numpy as np

from mlsys_lab.peft.nf4 import NF4_BITSANDBYTES, double_dequantize, double_quantize, int4_levels, quantization_rmse
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
