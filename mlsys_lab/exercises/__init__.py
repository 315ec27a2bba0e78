"""Exercise checks: one deterministic verdict line per exercise.

Every lesson module in this package defines ``check_<name>(fn)`` functions built on :func:`check`.
A check runs the learner's function on a list of :class:`Case` objects (the examples from the text
plus fresh random ones) and prints exactly one line:

    ✓ ring_allreduce: 12/12 cases
    ✗ ring_allreduce: case 3 (p=5, n=7): got [...], expected [...]
    … ring_allreduce: not attempted yet

The ✓ line depends only on the number of cases, so it is the same on every run and nbval can compare
it; the random cases change from run to run (set ``MLSYS_LAB_CHECK_SEED`` to replay one).
A case may also carry a resource budget: a ``check_result`` callable that inspects the result
(bytes moved, peak memory, steps) and returns an error message or ``None``.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

PASS, FAIL, TODO = "✓", "✗", "…"
# Where a verdict goes besides the printed line: the grader sets it (in its own process and thread)
# to keep the Verdict object itself, so that no printed text is ever what decides a grade.
VERDICT_SINK: ContextVar[Callable[[Verdict], None] | None] = ContextVar("VERDICT_SINK", default=None)


@dataclass
class Case:
    """One call of the learner's function: ``fn(*args, **kwargs)`` should give ``expected``."""

    label: str  # shown on failure, e.g. "p=5, n=7"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None
    # Optional extra test of the result (a resource budget, a property): returns an error or None.
    check_result: Callable[[Any], str | None] | None = None


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # PASS, FAIL or TODO
    line: str
    n_cases: int

    @property
    def passed(self) -> bool:
        return self.status == PASS


def rng() -> np.random.Generator:
    """Random generator for fresh cases: new each run, or replayable with MLSYS_LAB_CHECK_SEED."""
    seed = os.environ.get("MLSYS_LAB_CHECK_SEED")
    return np.random.default_rng(int(seed) if seed else None)


def short(value: Any, limit: int = 80) -> str:
    """A compact repr for verdict lines."""
    if isinstance(value, np.ndarray):
        text = np.array2string(value, precision=4, threshold=8, edgeitems=3).replace("\n", "")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def close_enough(got: Any, expected: Any, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    """Numbers and arrays within tolerance; everything else by equality."""
    if isinstance(expected, (np.ndarray, float, np.floating)) or (
        isinstance(expected, (list, tuple)) and expected and isinstance(expected[0], (float, np.ndarray))
    ):
        try:
            got_arr, exp_arr = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
        except (TypeError, ValueError):
            return False
        return got_arr.shape == exp_arr.shape and bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=atol))
    return got == expected


def evaluate(
    name: str,
    fn: Callable,
    cases: Iterable[Case],
    compare: Callable[[Any, Any], bool] = close_enough,
) -> Verdict:
    """Run ``fn`` on every case and return the verdict (without printing it)."""
    cases = list(cases)
    for index, case in enumerate(cases, start=1):
        try:
            got = fn(*case.args, **case.kwargs)
        except NotImplementedError:
            return Verdict(name, TODO, f"{TODO} {name}: not attempted yet", len(cases))
        except Exception as exc:  # the learner's code failed: report it, don't raise
            return Verdict(name, FAIL, f"{FAIL} {name}: case {index} ({case.label}): raised "
                           f"{type(exc).__name__}: {short(str(exc))}", len(cases))
        if not compare(got, case.expected):
            return Verdict(name, FAIL, f"{FAIL} {name}: case {index} ({case.label}): got {short(got)}, "
                           f"expected {short(case.expected)}", len(cases))
        problem = case.check_result(got) if case.check_result else None
        if problem:
            return Verdict(name, FAIL, f"{FAIL} {name}: case {index} ({case.label}): {problem}", len(cases))
    return Verdict(name, PASS, f"{PASS} {name}: {len(cases)}/{len(cases)} cases", len(cases))


def check(name: str, fn: Callable, cases: Iterable[Case], compare: Callable[[Any, Any], bool] = close_enough) -> None:
    """Run the cases and print the one-line verdict (what a notebook's check cell shows)."""
    verdict = evaluate(name, fn, cases, compare)
    sink = VERDICT_SINK.get()
    if sink is not None:
        sink(verdict)
    print(verdict.line)
