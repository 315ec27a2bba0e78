"""Exercise checks: one deterministic verdict line per exercise.

Every lesson module in this package defines ``check_<name>(fn)`` functions built on :func:`check`.
A check runs the learner's function on a list of :class:`Case` objects (the examples from the text
plus fresh random ones) and prints exactly one line:

    ✓ ring_allreduce: 12/12 cases
    ✗ ring_allreduce: case 3 (p=5, n=7): got [...], expected [...]
    … ring_allreduce: not attempted yet
    … bias_gelu: needs a CUDA GPU, not graded here (open the Colab badge for a free T4)

The ✓ line depends only on the number of cases, so it is the same on every run and nbval can compare
it; the random cases change from run to run (set ``MLSYS_LAB_CHECK_SEED`` to replay one, or run the check
inside ``with seeded(7):``, which is how the wrong-answer catalogues in ``tests/`` replay 50 seeds).
A case may also carry a resource budget: a ``check_result`` callable that inspects the result
(bytes moved, peak memory, steps) and returns an error message or ``None``.

A failing verdict names the case, the expected and received values, and, when the learner's code raised,
the line of theirs that raised (:func:`mlsys_lab.tracebacks.learner_line`). A return value that
cannot even be compared (a string where a number was due, an object whose ``==`` raises) is a failed case
with what was received, never a traceback. A kernel exercise may add a performance ``figure`` ("71% of copy
bandwidth") to a passing verdict; the grader reports it beside pass/fail. A check that passes in a learner's own
notebook keeps the function as their piece, which later lessons run (:mod:`mlsys_lab.pieces`).

Every check has, in ``tests/<slug>/test_exercise_catalogue.py``, a catalogue of wrong implementations that
it must reject on every one of 50 seeds (``tests/catalogue.py`` runs them).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from mlsys_lab import argument_changes, pieces
from mlsys_lab.tracebacks import learner_line

PASS, FAIL, TODO = "✓", "✗", "…"
# Exercises that transcribe a formula of their lesson: short warm-ups before the mechanisms the lesson builds, marked
# "(warm-up)" in their prompt and not counted among its builds (tests/course/test_exercise_standard.py). Every other
# exercise builds the mechanism it is about (a pass, a kernel, a schedule, a collective, a writer) and runs it.
WARM_UPS = frozenset({
    "tensor_bytes", "add_intensity",  # 00, the course's first two exercises
    "matmul_intensity", "training_bytes", "quantize_groupwise", "allreduce_time", "zero_memory",
    "microbatches_for_bubble", "checkpoint_interval", "goodput", "lora_forward", "lora_merge", "lora_param_count",
})
# Where a verdict goes besides the printed line: the grader sets it (in its own process and thread)
# to keep the Verdict object itself, so that no printed text is ever what decides a grade.
VERDICT_SINK: ContextVar[Callable[[Verdict], None] | None] = ContextVar("VERDICT_SINK", default=None)
# The seed of the random cases when set (see :func:`seeded`); otherwise MLSYS_LAB_CHECK_SEED, otherwise fresh.
CHECK_SEED: ContextVar[int | None] = ContextVar("CHECK_SEED", default=None)
# Whether the case being run lets the learner's function change its arguments (the grader's stand-in reads it to
# judge what its worker saw).
ARGUMENTS_MAY_CHANGE: ContextVar[bool | tuple] = ContextVar("ARGUMENTS_MAY_CHANGE", default=())


class ArgumentChanged(Exception):
    """The learner's function changed one of its arguments in place (raised where only the grader's worker saw it)."""


@dataclass
class Case:
    """One call of the learner's function: ``fn(*args, **kwargs)`` should give ``expected``."""

    label: str  # shown on failure, e.g. "p=5, n=7"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None
    # Optional extra test of the result (a resource budget, a property): returns an error or None.
    check_result: Callable[[Any], str | None] | None = None
    # Which arguments the learner's function may update in place: their positions (or keywords), True for all; a
    # change of any other is the case's failure, told before any value is compared (mlsys_lab.argument_changes).
    may_change_args: bool | tuple = ()


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # PASS, FAIL or TODO
    line: str
    n_cases: int
    figure: str = ""  # a kernel exercise's performance on a pass, e.g. "71% of copy bandwidth"
    # What this machine lacks to grade the exercise ("a CUDA GPU"): the status is then TODO, and the exercise is
    # not graded here, neither passed nor failed (see :func:`not_graded_here`).
    needs: str = ""
    # A kernel exercise's second point: whether its speed met the exercise's floor (a fraction of the course's
    # kernel on the same GPU); None for an exercise without a speed floor, or one that did not pass.
    floor_met: bool | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASS


def rng() -> np.random.Generator:
    """Random generator for fresh cases: new each run, or replayable with :func:`seeded` or MLSYS_LAB_CHECK_SEED."""
    seed = CHECK_SEED.get()
    if seed is None:
        text = os.environ.get("MLSYS_LAB_CHECK_SEED")
        seed = int(text) if text else None
    return np.random.default_rng(seed)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run checks with the random cases of ``seed`` (the same cases every time)."""
    token = CHECK_SEED.set(int(seed))
    try:
        yield
    finally:
        CHECK_SEED.reset(token)


def short(value: Any, limit: int = 80) -> str:
    """A compact repr for verdict lines."""
    if isinstance(value, np.ndarray):
        text = np.array2string(value, precision=4, threshold=8, edgeitems=3).replace("\n", "")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_python_scalar(value: Any) -> Any:
    """A NumPy scalar or 0-d array as the Python number it holds (``np.int64(3)`` -> ``3``); else ``value``.

    An honest answer computed with NumPy comes back as ``np.int64``, ``np.float64``, ``np.bool_`` or a 0-d
    array: a check judges its value, not its type. ``np.bool_`` becomes ``bool``, so ``True`` is still not 1.
    """
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


def is_number(value: Any) -> bool:
    """An int or float, Python or NumPy (a 0-d array too); not a bool, a string or anything else."""
    value = as_python_scalar(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def close_enough(got: Any, expected: Any, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    """Numbers and arrays within tolerance; everything else by equality, of values not types.

    ``np.int64(3)`` equals ``3`` and a 0-d array equals its scalar, but ``True`` is not ``1``, a string is not
    a number, a list is not a tuple; tuples, lists and dicts are compared item by item.
    """
    got, expected = as_python_scalar(got), as_python_scalar(expected)
    if isinstance(expected, (np.ndarray, float)) or (
        isinstance(expected, (list, tuple)) and expected and isinstance(expected[0], (float, np.ndarray))
    ):
        try:
            kinds = "US" if np.asarray(expected).dtype.kind == "b" else "USb"
            if isinstance(got, (str, bytes)) or np.asarray(got).dtype.kind in kinds:
                return False  # np.asarray("0.5", dtype=float) would read the string as a number, True as 1.0
            got_arr, exp_arr = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
        except (TypeError, ValueError, OverflowError):
            return False
        return got_arr.shape == exp_arr.shape and bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=atol))
    if isinstance(got, bool) != isinstance(expected, bool):
        return False
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and isinstance(got, tuple) == isinstance(expected, tuple)
                and len(got) == len(expected)
                and all(close_enough(g, e, rtol, atol) for g, e in zip(got, expected, strict=True)))
    if isinstance(expected, dict):
        return (isinstance(got, dict) and set(got) == set(expected)
                and all(close_enough(got[k], expected[k], rtol, atol) for k in expected))
    result = got == expected
    return result if isinstance(result, bool) else False


def evaluate(
    name: str,
    fn: Callable,
    cases: Iterable[Case],
    compare: Callable[[Any, Any], bool] = close_enough,
) -> Verdict:
    """Run ``fn`` on every case and return the verdict (without printing it)."""
    cases = list(cases)

    def fail(index: int, case: Case, text: str) -> Verdict:
        return Verdict(name, FAIL, f"{FAIL} {name}: case {index} ({case.label}): {text}", len(cases))

    for index, case in enumerate(cases, start=1):
        before = {} if case.may_change_args is True else argument_changes.snapshot_arrays(fn, case.args, case.kwargs)
        token = ARGUMENTS_MAY_CHANGE.set(case.may_change_args)
        try:
            got = fn(*case.args, **case.kwargs)
        except NotImplementedError:
            return Verdict(name, TODO, f"{TODO} {name}: not attempted yet", len(cases))
        except ArgumentChanged as exc:
            return fail(index, case, str(exc))
        except Exception as exc:  # the learner's code failed: report it and where, don't raise
            return fail(index, case, raised(exc))
        finally:
            ARGUMENTS_MAY_CHANGE.reset(token)
        changed = argument_changes.changed(before, case.may_change_args)
        if changed:
            return fail(index, case, argument_changes.message(changed[0]))
        try:
            same = compare(got, case.expected)
        except Exception as exc:  # a return value the comparison cannot handle is a wrong answer
            return fail(index, case, f"got {short(got)} ({type(got).__name__}, which cannot be compared: "
                        f"{type(exc).__name__}), expected {short(case.expected)}")
        if not same:
            return fail(index, case, mismatch(got, case.expected))
        try:
            problem = case.check_result(got) if case.check_result else None
        except Exception as exc:
            problem = f"got {short(got)}, which the check cannot inspect ({type(exc).__name__}: {short(str(exc))})"
        if problem:
            return fail(index, case, problem)
    return Verdict(name, PASS, f"{PASS} {name}: {len(cases)}/{len(cases)} cases", len(cases))


def mismatch(got: Any, expected: Any) -> str:
    """Why ``got`` is not ``expected``, in the terms of the slip: a shape, a length or a kind of number before any
    values (``expected shape (4, 64), got shape (64, 4)``), else both values."""
    values = f"got {short(got)}, expected {short(expected)}"
    if isinstance(expected, tuple) and isinstance(got, (tuple, list)) and len(got) != len(expected):
        return f"expected a tuple of {len(expected)} items, got {len(got)} items: {short(got)}"
    if isinstance(expected, tuple) and isinstance(got, (tuple, list)):
        for i, (g, e) in enumerate(zip(got, expected, strict=True), start=1):
            slip = _array_slip(g, e)
            if slip:
                return f"item {i} of the result: {slip}"
        return values
    return _array_slip(got, expected) or values


def _array_slip(got: Any, expected: Any) -> str:
    """A shape or kind mismatch between an array result and the expected array; "" when there is none."""
    if not isinstance(expected, np.ndarray):
        return ""
    if isinstance(got, (str, bytes, dict)) or got is None:
        return f"expected an array of shape {expected.shape}, got {type(got).__name__} {short(got, 40)}"
    try:
        have = np.asarray(got)
    except Exception:
        return ""
    if have.shape != expected.shape:
        return f"expected shape {expected.shape}, got shape {have.shape}"
    if expected.dtype.kind in "biufc" and have.dtype.kind not in "biufc":
        return f"expected an array of numbers, got dtype {have.dtype}"
    return ""


def raised(exc: BaseException) -> str:
    """``raised IndexError: ... at line 4: out[i] = x`` (the learner's line when it can be found)."""
    where = getattr(exc, "learner_line", "") or learner_line(exc)
    message = str(exc) if len(str(exc)) <= 80 else str(exc)[:77] + "..."
    return f"raised {type(exc).__name__}: {message}" + (f" at {where}" if where else "")


def check(name: str, fn: Callable, cases: Iterable[Case], compare: Callable[[Any, Any], bool] = close_enough,
          figure: Callable[[], str] | None = None, learner: Callable | None = None) -> Verdict:
    """Run the cases, print the one-line verdict (what a notebook's check cell shows) and return it.

    ``figure``, called only on a pass, gives a performance figure ("71% of copy bandwidth") that the grader
    reports beside the verdict. It is not part of the printed line, which nbval compares and which must not
    depend on the machine: a notebook shows the figure in a cell of its own (``verdict.figure``).
    ``learner``: the learner's function when ``fn`` is the check's own runner that calls it (a runner that
    builds a network, kills a writer, times a kernel); it, not the runner, is kept as the learner's piece.
    """
    verdict = evaluate(name, fn, cases, compare)
    if verdict.passed and figure is not None:
        verdict = Verdict(verdict.name, verdict.status, verdict.line, verdict.n_cases, str(figure()))
    if verdict.passed:
        keep_learners_piece(name, fn if learner is None else learner, sys._getframe(1).f_globals.get("__name__", ""))
    return report(verdict)


def keep_learners_piece(name: str, fn: Callable, check_module: str) -> None:
    """In a learner's own notebook (no grader's sink: not the grader, not a catalogue), keep ``fn``, whose check in
    ``check_module`` just passed, as their piece ``name``: later lessons and the capstone run it."""
    if VERDICT_SINK.get() is None:
        pieces.keep(name, fn, pieces.lesson_of_check_module(check_module))


def report(verdict: Verdict) -> Verdict:
    """Hand ``verdict`` to the grader's sink when one is set, print its line, and return it."""
    sink = VERDICT_SINK.get()
    if sink is not None:
        sink(verdict)
    print(verdict.line)
    return verdict


def not_graded_here(name: str, needs: str, where: str) -> Verdict:
    """Report that this machine cannot grade ``name``: ``… name: needs <needs>, not graded here (<where>)``.

    The learner's function is never called. A grader reads ``Verdict.needs`` and records the exercise as not
    graded, never as a failure.
    """
    return report(Verdict(name, TODO, f"{TODO} {name}: needs {needs}, not graded here ({where})", 0, needs=needs))
