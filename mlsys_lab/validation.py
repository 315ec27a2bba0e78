"""Argument checks whose errors name the parameter and the allowed range.

Every public function in the course validates its inputs with these helpers, so a learner who
types ``tp=3`` for 32 heads reads ``tp must divide n_heads=32 (allowed: 1, 2, 4, 8, 16, 32); got 3``
instead of a shape error ten frames deep. Widgets catch :class:`ValueError` and show its message.
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable


def _range_text(low, high) -> str:
    if low is not None and high is not None:
        return f"between {low} and {high}"
    if low is not None:
        return f">= {low}"
    if high is not None:
        return f"<= {high}"
    return "any value"


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise ValueError naming ``name`` and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer {_range_text(low, high)}; got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {_range_text(low, high)}; got {value}")
    return value


def check_number(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Return ``value`` as a float in the range, or raise ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        allowed = "" if low is None and high is None else f" {_range_text(low, high)}"
        raise ValueError(f"{name} must be a number{allowed}; got {value!r}")
    value = float(value)
    too_low = low is not None and (value < low or (not low_inclusive and value == low))
    too_high = high is not None and (value > high or (not high_inclusive and value == high))
    if too_low or too_high:
        lo = "" if low is None else ("[" if low_inclusive else "(") + f"{low}"
        hi = "" if high is None else f"{high}" + ("]" if high_inclusive else ")")
        if low is not None and high is not None:
            allowed = f"in {lo}, {hi}"
        elif low is not None:
            allowed = f"{'>=' if low_inclusive else '>'} {low}"
        else:
            allowed = f"{'<=' if high_inclusive else '<'} {high}"
        raise ValueError(f"{name} must be a number {allowed}; got {value:g}")
    return value


def check_positive(name: str, value, *, finite: bool = True) -> float:
    """A strictly positive number (sizes, bandwidths, times), finite unless ``finite=False`` (an infinite
    size or time in a formula only turns its result into inf or NaN)."""
    value = check_number(name, value, low=0.0, low_inclusive=False)
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0; got {value}")
    return value


def check_finite(name: str, value, *, low: float | None = None, low_inclusive: bool = True) -> float:
    """A finite number (no NaN, no ±inf) at or above ``low``: sizes, seconds, bandwidths, factors."""
    value = check_number(name, value, low=low, low_inclusive=low_inclusive)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value}")
    return value


def check_bool(name: str, value) -> bool:
    """A flag: True or False. A 0 or 1 here is usually an argument given in the wrong place."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r:.60}")
    return bool(value)


def check_type(name: str, value, kinds: type | tuple[type, ...]):
    """``value`` must be an instance of ``kinds`` (a str, a Generator, a Graph, ...): TypeError naming ``name``."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):  # True is an int too
        wanted = " or ".join(k.__name__ for k in kinds)
        raise TypeError(f"{name} must be a {wanted}; got {type(value).__name__} {value!r:.60}")
    return value


def check_array(name: str, value, *, ndim: int | tuple[int, ...] | None = None, kinds: str = "fiu",
                finite: bool = False, min_size: int = 1, shape: tuple | None = None):
    """``value`` as an array of numbers (NumPy, or CuPy left on the GPU): TypeError unless its dtype kind is in
    ``kinds`` ('f' float, 'i'/'u' integer, 'b' bool); ValueError for another number of dimensions, fewer than
    ``min_size`` elements, another ``shape`` (a tuple whose None entries match any length: ``(n, None)``) or,
    with ``finite``, a NaN or inf. Every message names ``name``."""
    import numpy as np

    if hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "ndim"):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as error:  # ragged lists, objects NumPy cannot read
            raise TypeError(f"{name} must be an array of numbers; got {type(value).__name__}") from error
    if array.dtype.kind not in kinds:
        raise TypeError(f"{name} must be an array of numbers (dtype kind in {kinds!r}); got "
                        f"{type(value).__name__} of dtype {array.dtype}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and array.ndim not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dimensions; got shape {tuple(array.shape)}")
    if array.size < min_size:
        raise ValueError(f"{name} must have at least {min_size} element(s); got shape {tuple(array.shape)}")
    if shape is not None and (array.ndim != len(shape)
                              or any(w is not None and g != w for g, w in zip(array.shape, shape, strict=False))):
        wanted = ", ".join("any" if want is None else str(want) for want in shape) + ("," if len(shape) == 1 else "")
        raise ValueError(f"{name} must have shape ({wanted}); got {tuple(array.shape)}")
    if finite and array.dtype.kind == "f" and not bool((abs(array) < float("inf")).all()):
        raise ValueError(f"{name} must hold finite numbers (no NaN or inf)")
    return array


def check_sequence(name: str, value, *, min_size: int = 0, max_size: int | None = None) -> list:
    """``value`` as a list: a list or tuple (not a string, not a scalar) of ``min_size`` to ``max_size`` items."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple; got {type(value).__name__} {value!r:.60}")
    if len(value) < min_size or (max_size is not None and len(value) > max_size):
        raise ValueError(f"{name} must hold {_range_text(min_size, max_size)} item(s); got {len(value)}")
    return list(value)


def check_names(name: str, value, *, min_size: int = 0, max_size: int | None = None) -> list[str]:
    """A sequence of names (a list or tuple of non-empty str) as a list. A plain str is refused: it is iterable
    too, and ``for n in names`` would walk its characters ('qv' read as the names 'q' and 'v')."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be a list or tuple of names, not a str; got {value!r:.60} (write "
                        f"[{value!r:.40}] for one name)")
    items = check_sequence(name, value, min_size=min_size, max_size=max_size)
    for item in items:
        check_str(f"each of {name}", item)
    return items


def check_str(name: str, value, *, nonempty: bool = True) -> str:
    """A name, a path, a pattern: a str (non-empty unless ``nonempty=False``), TypeError/ValueError naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str; got {type(value).__name__} {value!r:.60}")
    if nonempty and not value:
        raise ValueError(f"{name} must be a non-empty str; got ''")
    return value


def check_index_array(name: str, indices, n: int, *, of_name: str):
    """An integer array whose entries index ``n`` things (``0 <= i < n``), as NumPy; ``of_name`` names ``n``."""
    import numpy as np

    from mlsys_lab import backend

    try:
        array = np.asarray(backend.asnumpy(indices))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be an integer array; got {type(indices).__name__}") from error
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array; got dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= n):
        raise ValueError(f"{name} must lie in [0, {n - 1}] for {of_name}={n}; got values in "
                         f"[{array.min()}, {array.max()}]")
    return array


def check_choice(name: str, value, choices: Iterable, *, among: str | None = None) -> object:
    """``value`` must be one of ``choices``; ``among`` names where the choices come from (a config's field:
    ``among="hardware.peak_flop_per_s"``), so that a config holding the wrong ones is named too."""
    choices = tuple(choices)
    try:  # an array compares element by element, a list is unhashable: neither is one of the choices
        found = (not hasattr(value, "ndim") or value.ndim == 0) and value in choices
    except (TypeError, ValueError):
        found = False
    if not found:
        where = f" (the keys of {among})" if among else ""
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}{where}; got {value!r}")
    return value


def check_divisible(name: str, value: int, multiple: int) -> int:
    """``value`` must be a positive multiple of ``multiple`` (a kernel's vector width or tile size)."""
    check_int(name, value, low=1)
    if value % multiple:
        raise ValueError(f"{name} must be a multiple of {multiple}; got {value}")
    return value


def check_divides(name: str, value: int, *, of_name: str, of_value: int) -> int:
    """``value`` must divide ``of_value`` (e.g. tensor-parallel degree and head count)."""
    value = check_int(name, value, low=1)
    if of_value % value:
        if of_value > 10**12:  # listing divisors would take too long
            raise ValueError(f"{name} must divide {of_name}={of_value}; got {value}")
        small = [d for d in range(1, math.isqrt(of_value) + 1) if of_value % d == 0]  # d <= √n, then n/d
        divisors = sorted(set(small) | {of_value // d for d in small})
        shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
        raise ValueError(f"{name} must divide {of_name}={of_value} (allowed: {shown}); got {value}")
    return value


# --- checking a result against its reference ----------------------------------------------------------

def _as_float64(name: str, value):
    """``value`` (NumPy or CuPy) as a float64 NumPy array; TypeError naming ``name`` for non-numbers. NaN is kept:
    a NaN result must come out as a NaN error, which fails every tolerance."""
    import numpy as np

    from mlsys_lab import backend

    array = np.asarray(backend.asnumpy(value))
    try:
        if array.dtype.kind not in "fiubcO":  # strings, bytes, dates: not numbers (objects: as NumPy converts them)
            raise TypeError
        return array.astype(np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be an array of numbers; got {type(value).__name__} of dtype {array.dtype}") \
            from error


def relative_error(got, expected) -> float:
    """‖got − expected‖_F / ‖expected‖_F in float64, for arrays of either backend (NumPy or CuPy).

    The error every kernel and approximation in the course is checked by: scale-free, and small
    for a float32 result of a float64 reference (about 1e-7 per operation).
    """
    import numpy as np


    got64, exp64 = _as_float64("got", got), _as_float64("expected", expected)
    if got64.shape != exp64.shape:
        raise ValueError(f"got must have the shape of expected {exp64.shape}; got {got64.shape}")
    return float(np.linalg.norm(got64 - exp64) / max(np.linalg.norm(exp64), 1e-300))


def max_relative_error(got, expected) -> float:
    """max |got − expected| / max |expected| in float64: the worst element, scaled by the largest one."""
    import numpy as np


    got64, exp64 = _as_float64("got", got), _as_float64("expected", expected)
    if got64.shape != exp64.shape:
        raise ValueError(f"got must have the shape of expected {exp64.shape}; got {got64.shape}")
    return float(np.abs(got64 - exp64).max() / max(np.abs(exp64).max(), 1e-30))
