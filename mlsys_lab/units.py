"""Units: bytes per element of each number format, and formatters for bytes, durations and rates.

Every lesson counts bytes and seconds; this module is the one table of element sizes and the one
way to print a quantity, so that 1.5 GB means the same thing in every notebook (powers of 1000, as
GPU datasheets count).

    bytes_per_element("bf16")        # 2
    format_bytes(1.5e9)              # '1.5 GB'
    format_seconds(4.56e-3)          # '4.56 ms'
    format_duration(5 * 86400)       # '5 days'
    format_si(4.8e12, "B/s")         # '4.8 TB/s'
"""

from __future__ import annotations

from mlsys_lab.validation import check_choice, check_number

#: Bytes per element. tf32 is stored in 32 bits (it only computes with a 10-bit mantissa);
#: int4 packs two values per byte.
BYTES_PER_DTYPE: dict[str, float] = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1,
                                     "int8": 1, "int4": 0.5}

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def bytes_per_element(dtype: str) -> float:
    """Bytes per element of a dtype name: ``"fp32"`` -> 4, ``"int4"`` -> 0.5."""
    check_choice("dtype", dtype, BYTES_PER_DTYPE)
    return BYTES_PER_DTYPE[dtype]


def format_bytes(n_bytes: float) -> str:
    """Human units, powers of 1000 (as GPU datasheets count): 1.5 GB, 230 MB, 12 kB."""
    check_number("n_bytes", n_bytes)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.0f} B"


def format_seconds(seconds: float) -> str:
    """Format a duration with a sensible unit: 12.3 µs, 4.56 ms, 1.20 s."""
    check_number("seconds", seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_duration(seconds: float) -> str:
    """A long duration in the unit a person would use: 14.4 min, 3.09 h, 5.8 days."""
    s = check_number("seconds", seconds, low=0.0)
    for unit, scale in (("days", DAY), ("h", HOUR), ("min", MINUTE)):
        if s >= 2 * scale if unit != "min" else s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def format_si(value: float, unit: str) -> str:
    """A count or a rate with an SI prefix: ``format_si(4.8e12, "B/s")`` -> '4.8 TB/s'.

    ``format_si(9.9e14, "FLOP/s")`` -> '990 TFLOP/s'; ``format_si(2.1e9, "FLOP")`` -> '2.1 GFLOP'.
    """
    value = check_number("value", value)
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a str such as 'B/s' or 'FLOP'; got {type(unit).__name__}")
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
