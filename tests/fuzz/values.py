"""The bad values the fuzz suite tries: fixed ones for every parameter, and a pool that Hypothesis generates.

Every parameter gets all of :data:`FIXED_BAD` and :data:`GENERATED_PER_PARAMETER` values of the pool (picked by a
hash of the function's and parameter's names, so each parameter meets different ones and a run is reproducible).
"""

from __future__ import annotations

import functools
import math
import zlib

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
