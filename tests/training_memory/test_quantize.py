"""Are the quantizers right, on hand-worked values and on random data?"""

import numpy as np
import pytest

from mlsys_lab.training_memory.quantize import (
    dequantize,
    dequantize_blockwise,
    nf4_bits_per_param,
    nf4_levels,
    nf4_quantize_dequantize,
    quantize,
    quantize_blockwise,
    quantized_matmul_error,
)
from mlsys_lab.validation import relative_error

# bitsandbytes' NF4 code (functional.py, get_4bit_type("nf4")), as printed in the QLoRA appendix.
NF4_PUBLISHED = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]


def test_hand_worked_symmetric_and_asymmetric():
    w = np.array([[-1.0, 0.5, 0.25, 1.0]])
    q = quantize(w, 2, "symmetric", "tensor")  # levels −1, 0, 1 × scale 1
    np.testing.assert_array_equal(q.codes, [[-1, 0, 0, 1]])  # 0.5 rounds to even
    q = quantize(np.array([[0.0, 1.0, 2.0, 3.0]]), 2, "asymmetric", "tensor")  # scale 1, zero 0
    np.testing.assert_array_equal(dequantize(q), [[0.0, 1.0, 2.0, 3.0]])


def test_error_falls_with_bits_and_finer_groups():
    w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    errors = [relative_error(dequantize(quantize(w, b)), w) for b in (2, 4, 8)]
    assert errors[0] > errors[1] > errors[2]
    # each bit halves the step: 4 more bits ≈ 16× less error
    assert 10 < errors[1] / errors[2] < 25
    tensor, channel, group = (relative_error(dequantize(quantize(w, 4, "symmetric", g, 32)), w)
                              for g in ("tensor", "channel", "group"))
    assert tensor > channel > group


def test_storage_bytes():
    q = quantize(np.ones((4, 256)), 4, "symmetric", "group", 64)
    assert q.storage_bytes == 4 * 256 / 2 + 16 * 2
    with pytest.raises(ValueError, match="group_size"):
        quantize(np.ones((4, 100)), 4, "symmetric", "group", 64)


def test_nf4_levels_match_bitsandbytes_and_beat_int4_on_normal_weights():
    np.testing.assert_allclose(nf4_levels(), NF4_PUBLISHED, atol=1e-6)
    w = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    int4 = quantize(w, 4, "symmetric", "group", 64)
    assert relative_error(nf4_quantize_dequantize(w, 64), w) < relative_error(dequantize(int4), w)
    assert nf4_bits_per_param(64, double_quant=False) == 4.5
    assert nf4_bits_per_param() == pytest.approx(4.127, abs=1e-3)  # QLoRA §3: 0.127 bits of constants


def test_activation_quantization_adds_error_with_outlier_features():
    g = np.random.default_rng(2)
    x, w = g.standard_normal((32, 256)), g.standard_normal((64, 256)) * 0.02
    x[:, :3] *= 60  # a few large feature dimensions, as LLM.int8 observed
    assert quantized_matmul_error(x, w, 8, activations=True) > 2 * quantized_matmul_error(x, w, 8)


def test_blockwise_quantization_keeps_the_absmax_exactly():
    weights = np.random.default_rng(1).normal(size=128).astype(np.float32)
    codes, absmax = quantize_blockwise(weights, nf4_levels(), 64)
    assert codes.max() <= 15 and absmax.shape == (2,)
    restored = nf4_levels()[codes].reshape(2, 64) * absmax[:, None]
    blocks = weights.reshape(2, 64)
    arg = np.abs(blocks).argmax(axis=1)
    np.testing.assert_allclose(restored[[0, 1], arg], blocks[[0, 1], arg], rtol=1e-6)
    with pytest.raises(ValueError, match="block_size"):
        quantize_blockwise(weights[:100], nf4_levels(), 64)


def test_blockwise_by_hand_and_nf4_round_trip_is_the_blockwise_one():
    """Levels −1, 0, 1; block [0.2, −2, 0.9, 1.0]: absmax 2, scaled [0.1, −1, 0.45, 0.5] → codes 1, 0, 1, 1.

    0.5 sits on the midpoint between the levels 0 and 1: the tie goes to the lower level.
    """
    levels = np.array([-1.0, 0.0, 1.0])
    codes, absmax = quantize_blockwise(np.array([0.2, -2.0, 0.9, 1.0]), levels, 4)
    np.testing.assert_array_equal(codes, [1, 0, 1, 1])
    np.testing.assert_array_equal(dequantize_blockwise(codes, absmax, levels), [0.0, -2.0, 0.0, 0.0])
    w = np.random.default_rng(5).standard_normal((8, 128)).astype(np.float32)
    levels32 = nf4_levels().astype(np.float32)
    flat = dequantize_blockwise(*quantize_blockwise(w, levels32, 64), levels32)
    np.testing.assert_array_equal(nf4_quantize_dequantize(w, 64), flat.reshape(w.shape))
    np.testing.assert_array_equal(nf4_quantize_dequantize(np.zeros((2, 64)), 64), np.zeros((2, 64)))
