"""Are the element sizes and formatters right on hand-worked values?"""

import pytest

from mlsys_lab.units import (
    BYTES_PER_DTYPE,
    bytes_per_element,
    format_bytes,
    format_duration,
    format_seconds,
    format_si,
)


def test_element_sizes():
    assert [bytes_per_element(d) for d in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")] == \
        [8, 4, 4, 2, 2, 1, 1, 0.5]
    assert set(BYTES_PER_DTYPE) == {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"}
    with pytest.raises(ValueError, match="dtype must be one of"):
        bytes_per_element("fp12")


def test_formatters():
    assert format_bytes(1.5e9) == "1.5 GB" and format_bytes(230e6) == "230 MB" and format_bytes(12) == "12 B"
    assert format_seconds(4.56e-3) == "4.56 ms" and format_seconds(12.3e-6) == "12.3 µs"
    assert format_seconds(2.5) == "2.5 s" and format_seconds(3e-9) == "3 ns"
    assert format_duration(5 * 86400) == "5 days" and format_duration(3 * 3600) == "3 h"
    assert format_duration(90) == "1.5 min" and format_duration(30) == "30 s"
    assert format_si(4.8e12, "B/s") == "4.8 TB/s" and format_si(9.895e14, "FLOP/s") == "990 TFLOP/s"
    assert format_si(2.1e9, "FLOP") == "2.1 GFLOP" and format_si(3.2e15, "FLOP") == "3.2 PFLOP"
    assert format_si(12, "B") == "12 B"
    with pytest.raises(ValueError, match="seconds"):
        format_duration(-1)
