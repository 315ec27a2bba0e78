"""FP8's limits from its bit layouts, against the OCP 8-bit floating-point specification (OFP8 v1.0, Table 1) and
against every one of the 256 codes decoded by the format's rules."""

import math

import numpy as np
import pytest

from mlsys_lab.training_memory.mixed_precision import FP8_E4M3, FP8_E5M2, FP16, FloatFormat

# OFP8 v1.0, Table 1: max normal, min normal, min subnormal, NaN and inf codes (both signs)
SPEC = {FP8_E4M3: (448.0, 2.0 ** -6, 2.0 ** -9, 2, 0), FP8_E5M2: (57344.0, 2.0 ** -14, 2.0 ** -16, 6, 2)}


@pytest.mark.parametrize("fmt", [FP8_E4M3, FP8_E5M2], ids=lambda f: f.name)
def test_the_closed_forms_are_the_specifications_limits(fmt):
    largest, normal, subnormal, _, _ = SPEC[fmt]
    assert (fmt.max, fmt.smallest_normal, fmt.smallest_subnormal) == (largest, normal, subnormal)


@pytest.mark.parametrize("fmt", [FP8_E4M3, FP8_E5M2, FP16], ids=lambda f: f.name)
def test_decoding_every_code_gives_the_same_limits_and_specials(fmt):
    values = np.array([fmt.decode(code) for code in range(2 ** fmt.n_bits)])
    finite = values[np.isfinite(values)]
    assert finite.max() == fmt.max and finite[finite > 0].min() == fmt.smallest_subnormal
    assert np.nextafter(1.0, 2.0) != 1.0 and min(v for v in finite if v > 1.0) == 1.0 + fmt.epsilon
    if fmt in SPEC:
        assert (int(np.isnan(values).sum()), int(np.isinf(values).sum())) == SPEC[fmt][3:]


def test_fp16s_decoder_agrees_with_numpy_on_every_code():
    codes = np.arange(2 ** 16, dtype=np.uint16)
    numpy_values = codes.view(np.float16).astype(np.float64)
    ours = np.array([FP16.decode(int(c)) for c in codes])
    assert np.array_equal(ours, numpy_values, equal_nan=True)


def test_an_ieee_style_e4m3_would_stop_at_240():
    """What the finite-only rule buys: the IEEE convention would keep the top exponent for inf/NaN."""
    assert FloatFormat("e4m3 ieee", 4, 3).max == 240.0 and FP8_E4M3.max == 448.0
    assert math.isnan(FP8_E4M3.decode(0x7F)) and FP8_E4M3.decode(0x7E) == 448.0
