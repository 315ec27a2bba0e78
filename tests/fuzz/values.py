"""The bad values the fuzz suite tries: fixed ones for every parameter, and a pool that Hypothesis generates.

Every parameter gets all of :data:`FIXED_BAD` and :data:`GENERATED_PER_PARAMETER` values of the pool (picked by a
hash of the function's and parameter's names, so each parameter meets different ones and a run is reproducible),
and the values :func:`typed_bad` makes from its baseline value: wrong in a way that only a value of that kind can be.

====================================  ==============================================================================
baseline value (or annotation)        typed bad values
====================================  ==============================================================================
an array (or a list of numbers)       the same with an extra leading dimension (a view of the wrong rank)
a number                              a mapping (``{'a': 1}``)
an int (a count, a size)              2**40 and 2**62: a product of two of them, or one times 8 bytes, overflows int64
a sequence of names (str items)       a plain str (iterable too: ``for name in names`` would walk its characters)
dependence (distance) vectors         the vectors negated: lexicographically negative, so never a legal dependence
====================================  ==============================================================================

A parameter whose baseline is a config (a dataclass instance) also gets instances rebuilt with one field replaced by
:data:`FIELD_BAD` and that field's typed values (``dataclasses.replace``, so the config's own checks run first).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import typing
import zlib
from collections.abc import Iterable, Sequence

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

GENERATED_PER_PARAMETER = 3  # values of the Hypothesis pool added to FIXED_BAD for each parameter


def _fixed_bad() -> list[tuple[str, object]]:
    return [
        ("0", 0), ("-1", -1), ("-0.5", -0.5), ("2.5", 2.5), ("nan", math.nan), ("inf", math.inf),
        ("-inf", -math.inf), ("10**30", 10**30), ("'ab'", "ab"), ("None", None), ("[]", []),
        ("empty array", np.empty(0)), ("mismatched array", np.ones((3, 5))), ("nan array", np.full(4, np.nan)),
    ]


FIXED_BAD = _fixed_bad()

# what a config's field is replaced by (with the field's typed values): the fixed values less the arrays, which the
# field's typed values cover by its own shape
FIELD_BAD = [(label, value) for label, value in FIXED_BAD if not isinstance(value, np.ndarray)]
FIELD_BAD.append(("{'a': 1}", {"a": 1}))

NEGATIVE_VECTORS = "vectors negated (lexicographically negative)"
MUST_REFUSE = {NEGATIVE_VECTORS}  # labels of values that no answer can make right: taking one is 'silent'
_DEPENDENCE = re.compile(r"(^|_)(vectors|dependences?|distances?|deps_vectors)($|_)")
_SEQUENCES = (list, tuple, Sequence, Iterable, typing.Sequence, typing.Iterable)


def _admits(hint, kind: type) -> bool:
    """Does an annotation admit values of ``kind`` (``str | Sequence[str]`` admits a str)?"""
    if hint is kind:
        return True
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
        return any(_admits(h, kind) for h in typing.get_args(hint))
    return False


def _sequence_of_str(value, hint) -> bool:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return True
    return typing.get_origin(hint) in _SEQUENCES and typing.get_args(hint)[:1] == (str,)


def typed_bad(name: str, baseline, hint=None) -> list[tuple[str, object]]:
    """Bad values made from a parameter's baseline value (and annotation): see the table of the module docstring."""
    out: list[tuple[str, object]] = []
    if isinstance(baseline, np.ndarray) and baseline.ndim >= 1 and baseline.size <= 1 << 16:
        out.append((f"extra leading dimension {(2, *baseline.shape)}", np.stack([baseline, baseline])))
    elif (isinstance(baseline, (list, tuple)) and 0 < len(baseline) <= 1 << 12
          and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in baseline)):
        out.append((f"extra leading dimension (2, {len(baseline)})", [list(baseline), list(baseline)]))
    number = isinstance(baseline, numbers.Real) and not isinstance(baseline, (bool, np.bool_))
    if number or hint in (int, float) or _admits(hint, int) or _admits(hint, float):
        out.append(("{'a': 1}", {"a": 1}))
    if (isinstance(baseline, numbers.Integral) and not isinstance(baseline, (bool, np.bool_))) or hint is int:
        out += [("2**40", 2**40), ("2**62", 2**62)]
    if _sequence_of_str(baseline, hint) and not _admits(hint, str):
        names = [v for v in baseline if isinstance(v, str)] if isinstance(baseline, (list, tuple)) else []
        word = names[0] if names and len(names[0]) > 1 else "".join(names) or "names"
        out.append((f"str {word!r:.30} for a sequence of names", word))
    vectors = (isinstance(baseline, (list, tuple)) and baseline
               and all(isinstance(v, (list, tuple)) and v and all(isinstance(e, numbers.Integral) for e in v)
                       for v in baseline))
    if vectors and _DEPENDENCE.search(name) and any(any(v) for v in baseline):
        out.append((NEGATIVE_VECTORS, [tuple(-int(e) for e in v) for v in baseline]))
    return out


def broken_fields(config) -> list[tuple[str, str, object]]:
    """(field, label, value) for each init field of a config (a dataclass instance): FIELD_BAD and its typed values."""
    try:
        hints = typing.get_type_hints(type(config))
    except Exception:  # noqa: BLE001 - an unresolvable annotation only means fewer typed values
        hints = {}
    out = []
    for field in dataclasses.fields(config):
        if field.init and not field.name.startswith("_"):
            typed = typed_bad(field.name, getattr(config, field.name, None), hints.get(field.name))
            out += [(field.name, label, bad) for label, bad in dict(FIELD_BAD + typed).items()]
    return out

BAD_VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(-3, 3), max_size=3),
)

POOL_SIZE = 96  # distinct generated values, drawn once; each parameter gets its own few of them


@functools.lru_cache(maxsize=1)
def generated_pool() -> tuple[tuple[str, object], ...]:
    """Distinct bad values from one derandomized Hypothesis run: [(label, value)], none equal to a fixed one.

    Drawn once per session (before the children fork) rather than per parameter: a Hypothesis run costs
    ~10 ms of set-up, and a derandomized run of the same test function draws the *same* values every time,
    so running it per parameter gave every parameter of the library the same one or two values.
    """
    drawn = []

    @settings(max_examples=POOL_SIZE * 2, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(value=BAD_VALUES)
    def collect(value):
        drawn.append(value)

    collect()
    pool, seen = [], {f"{type(v).__name__}:{v!r}" for _, v in FIXED_BAD}
    for value in drawn:
        key = f"{type(value).__name__}:{value!r}"
        if key not in seen:  # an int 0 and a float 0.0 are different inputs; two equal floats are not
            seen.add(key)
            pool.append((f"{value!r:.40}", value))
    return tuple(pool[:POOL_SIZE])


def generated_for(target_name: str, parameter: str) -> list[tuple[str, object]]:
    """GENERATED_PER_PARAMETER values of the pool for one parameter, picked by a hash of its name (stable)."""
    pool = generated_pool()
    first = zlib.crc32(f"{target_name}:{parameter}".encode())
    return [pool[(first + i * (len(pool) // GENERATED_PER_PARAMETER + 1)) % len(pool)]
            for i in range(GENERATED_PER_PARAMETER)]
