"""Do the float formats follow from their bits, and do loss scaling and master weights behave as the lesson says?"""

import numpy as np
import pytest

from mlsys_lab.training_memory.accounting import training_memory_bytes
from mlsys_lab.training_memory.mixed_precision import (
    BF16,
    FP16,
    FP32,
    FloatFormat,
    accumulate_updates,
    cast,
    scaled_cast_fractions,
    to_bfloat16,
    to_float16,
)


@pytest.mark.parametrize(("fmt", "dtype"), [(FP16, np.float16), (FP32, np.float32),
                                             (FloatFormat("fp64", 11, 52), np.float64)])
def test_limits_from_the_bit_layout_equal_numpys(fmt, dtype):
    info = np.finfo(dtype)
    assert fmt.max == float(info.max)
    assert fmt.smallest_normal == float(info.smallest_normal)
    assert fmt.smallest_subnormal == float(info.smallest_subnormal)
    assert fmt.epsilon == float(info.eps)
    assert fmt.n_bits == info.bits


def test_bf16_by_truncation_keeps_fp32_range_and_8_bits_of_precision():
    """Is truncated fp32 max bf16's max, and does 1 + 2^-8 fall back to 1 while 1 + 2^-7 survives?"""
    assert float(to_bfloat16(np.float32(np.finfo(np.float32).max))) == BF16.max
    assert float(to_bfloat16(np.float32(1 + 2.0 ** -7))) == 1 + BF16.epsilon
    assert float(to_bfloat16(np.float32(1 + 2.0 ** -8))) == 1.0
    assert float(to_bfloat16(np.float32(BF16.smallest_subnormal))) == BF16.smallest_subnormal
    assert float(to_bfloat16(np.float32(-1.99))) == -1.984375  # toward zero
    assert float(to_bfloat16(np.float32(1.99), rounding="nearest")) == 1.9921875
    assert to_bfloat16(np.ones((2, 3))).shape == (2, 3)


def test_fp16_overflows_and_flushes_where_its_limits_say():
    out = to_float16(np.array([70000.0, 65504.0, 2.0 ** -24, 2.0 ** -26]))
    assert np.isinf(out[0]) and out[1] == 65504 and out[2] == 2.0 ** -24 and out[3] == 0


def test_loss_scale_moves_gradients_from_zero_to_inf():
    g = np.array([1e-9, 1e-3, 1.0, -1e-9])
    r = scaled_cast_fractions(g, [1.0, 2.0 ** 16, 2.0 ** 32])
    np.testing.assert_allclose(r.flushed_fraction, [0.5, 0.0, 0.0])
    np.testing.assert_allclose(r.overflow_fraction, [0.0, 0.25, 0.5])  # 1e-3 and 1 overflow at 2^32
    assert scaled_cast_fractions(g, [1.0], "bf16").flushed_fraction[0] == 0.0


def test_small_updates_survive_only_in_fp32_master_weights():
    assert accumulate_updates(1.0, 1e-4, 100, "fp16") == 1.0
    assert accumulate_updates(1.0, 1e-4, 100, "bf16") == 1.0
    assert accumulate_updates(1.0, 1e-4, 100, "fp32") == pytest.approx(1.01, rel=1e-5)
    assert accumulate_updates(1.0, 1e-3, 1, "fp16") == float(np.float16(1.0 + 1e-3))


def test_megatron_18_and_zero_16_bytes_per_parameter():
    assert training_memory_bytes(1, "mixed", "adam", gradient_bytes=4).total == 18
    assert training_memory_bytes(1, "mixed", "adam").total == 16
    assert training_memory_bytes(10, "fp32", "adam", gradient_bytes=4).total == 160


@pytest.mark.parametrize(("call", "text"), [
    (lambda: FloatFormat("x", 1, 3), r"exponent_bits must be an integer"),
    (lambda: to_bfloat16([1.0], rounding="up"), r"rounding must be one of"),
    (lambda: cast([1.0], "fp8"), r"dtype must be one of"),
    (lambda: scaled_cast_fractions([1.0], [0.0]), r"scales must all be > 0"),
    (lambda: scaled_cast_fractions([0.0], [1.0]), r"gradients must have at least one nonzero"),
    (lambda: accumulate_updates(1.0, 1e-4, -1, "fp16"), r"n_steps must be an integer"),
    (lambda: training_memory_bytes(1, "mixed", "adam", gradient_bytes=3), r"gradient_bytes must be one of"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()
