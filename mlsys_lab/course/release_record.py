"""What a class release's checks need from the course's reference code, recorded as data (``mlsys-lab release``).

The *answer functions* are the checks' ``reference_*`` functions and every function of the check modules they are
built from (:func:`answer_functions`, found by following the names their code loads): a release ships none of
them. :func:`record_checks` runs each check of the full course with the release's seed, with every answer
function wrapped to note, per call, a hash of the arguments, the result as typed JSON and the state it left in
a mutable argument (:mod:`mlsys_lab.course.recorded`). The function the check judges meanwhile is the lesson's
``reference_<exercise>`` where the library has one, otherwise an oracle returning each case's expected value, so
the calls a check makes while judging a right answer are recorded too. Everything runs twice: a call the second
run makes that the first did not (arguments that change from run to run) cannot be answered from the record.
An exercise whose record is incomplete is listed with why; its release check says it cannot check that case.
"""

from __future__ import annotations

import contextlib
import copy
import dis
import functools
import io
import sys
from dataclasses import dataclass, field
from types import CodeType, FunctionType, ModuleType
from typing import Any, Callable

from mlsys_lab.course.recorded import Unrecordable, call_key, canonical, to_record

# Check helpers that compute an exercise's answer under a name not starting with reference_ (the release test,
# which looks for answers by their code, finds them): left out of a release like the references.
ANSWERS_BY_ANOTHER_NAME = ("mlsys_lab.exercises.parallelism:_smallest_microbatches",)
# The lesson's reference under another name than reference_<exercise> (used to judge while recording).
LEARNER_ALIASES = {"classify_bound": "reference_bound", "zero_memory": "reference_zero_peak",
                   "route_with_capacity": "reference_route", "resume_training": "reference_train"}


def exercise_modules(slugs: tuple[str, ...] | None = None) -> dict[str, ModuleType]:
    """Every check module by lesson slug (the lesson modules re-export the checks of their part modules)."""
    from mlsys_lab.course.checks import lessons

    return {slug: m for slug, m in lessons().items() if slugs is None or slug in slugs}


def check_module_names() -> list[str]:
    """Every module of ``mlsys_lab.exercises`` loaded now, lesson and part modules alike (not the package)."""
    return sorted(n for n in sys.modules if n.startswith("mlsys_lab.exercises.") and n.count(".") == 2)


def _loaded_names(code: CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _loaded_names(const)
    return names


def load_every_check_module() -> None:
    """Import every check module, including the part modules a check imports only when it runs: run each check
    once on a function that raises NotImplementedError (building its cases, judging nothing)."""
    from mlsys_lab.exercises import seeded

    def not_attempted(*args, **kwargs):
        raise NotImplementedError

    with contextlib.redirect_stdout(io.StringIO()), seeded(0):
        for module in exercise_modules().values():
            for name, check_fn in vars(module).items():
                if name.startswith("check_") and callable(check_fn):
                    with contextlib.suppress(Exception):
                        check_fn(not_attempted)


def answer_functions() -> dict[str, FunctionType]:
    """``"module:name"`` -> function: each module-level ``reference_*`` of the check modules (and those in
    :data:`ANSWERS_BY_ANOTHER_NAME`) and, transitively,
    each module-level function of a check module that one of them uses (``kernel_counts``: the counting a
    reference does is part of the answer)."""
    load_every_check_module()
    found: dict[str, FunctionType] = {}
    todo = [v for name in check_module_names() for key, v in vars(sys.modules[name]).items()
            if isinstance(v, FunctionType) and v.__module__ == name
            and (key.startswith("reference_") or f"{name}:{key}" in ANSWERS_BY_ANOTHER_NAME)]
    while todo:
        fn = todo.pop()
        qualified = f"{fn.__module__}:{fn.__name__}"
        if qualified in found or fn.__qualname__ != fn.__name__:
            continue
        found[qualified] = fn
        for name in _loaded_names(fn.__code__):
            used = fn.__globals__.get(name)
            if (isinstance(used, FunctionType) and used.__module__.startswith("mlsys_lab.exercises.")
                    and used.__module__ != "mlsys_lab.course.recorded"):
                todo.append(used)
    return found


class Oracle:
    """Stands for the learner while recording: each call returns the next case's expected value."""

    def __init__(self) -> None:
        self.cases: list | None = None
        self.index = 0

    def __call__(self, *args, **kwargs):
        if self.cases is None or self.index >= len(self.cases):
            raise NotImplementedError  # called inside a check's own wrapper: nothing to answer with
        self.index += 1
        return copy.deepcopy(self.cases[self.index - 1].expected)


@dataclass
class Recording:
    """The record being written: calls by answer function, and the exercises it cannot fully answer."""

    seed: int
    calls: dict[str, dict[str, dict]] = field(default_factory=dict)
    cannot_check: dict[str, str] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    exercise: str = ""
    verifying: bool = False

    def incomplete(self, why: str) -> None:
        self.cannot_check.setdefault(self.exercise, why)

    def wrap(self, qualified: str, fn: Callable) -> Callable:
        name = qualified.rsplit(":", 1)[1]

        @functools.wraps(fn)
        def recording(*args, **kwargs):
            try:
                key = call_key(args, kwargs)
                before = [canonical(a) for a in args] + [canonical(v) for v in kwargs.values()]
            except Unrecordable as exc:
                self.incomplete(f"{name} is called with {exc}")
                return fn(*args, **kwargs)
            table = self.calls.setdefault(qualified, {})
            if self.verifying:
                if key not in table:
                    self.incomplete(f"{name} gets different arguments on every run")
                return fn(*args, **kwargs)
            entry: dict[str, Any] = {}
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                entry["raises"] = [type(exc).__name__, str(exc)]
                result, raised = None, exc
            else:
                raised = None
            try:
                if raised is None:
                    entry["result"] = to_record(result)
                where = [*map(str, range(len(args))), *kwargs]
                values = [*args, *kwargs.values()]
                mutated = {w: to_record(v) for w, v, b in zip(where, values, before, strict=True) if canonical(v) != b}
                if mutated:
                    entry["mutates"] = mutated
                table[key] = entry
            except Unrecordable as exc:
                self.incomplete(f"{name} returns {exc}, which a record cannot hold")
            if raised is not None:
                raise raised
            return result

        return recording


def _learner(exercise: str, answers: dict[str, FunctionType], oracle: Oracle) -> Callable:
    name = LEARNER_ALIASES.get(exercise, f"reference_{exercise}")
    return next((fn for q, fn in answers.items() if q.endswith(f":{name}")), oracle)


@contextlib.contextmanager
def _patched(names: dict[tuple[str, str], Any]):
    """Set ``module.attribute`` for each ((module, attribute), value); put the old values back afterwards."""
    old = {(m, a): getattr(sys.modules[m], a) for m, a in names}
    try:
        for (m, a), value in names.items():
            setattr(sys.modules[m], a, value)
        yield
    finally:
        for (m, a), value in old.items():
            setattr(sys.modules[m], a, value)


def record_checks(seed: int, slugs: tuple[str, ...] | None = None) -> Recording:
    """Run every check of the lessons ``slugs`` (all by default) with ``seed`` and record the answer functions."""
    from mlsys_lab import exercises

    modules = exercise_modules(slugs)
    answers = answer_functions()
    recording = Recording(seed)
    oracle = Oracle()

    def recording_check(name, fn, cases, compare=exercises.close_enough, figure=None, learner=None):
        cases = list(cases)
        if fn is oracle:
            oracle.cases, oracle.index = cases, 0
        verdict = exercises.evaluate(name, fn, cases, compare)
        recording.verdicts[name] = verdict.line
        return verdict

    by_identity = {id(fn): q for q, fn in answers.items()}
    patches: dict[tuple[str, str], Any] = {("mlsys_lab.exercises", "check"): recording_check}
    for module in check_module_names():
        for attribute, value in vars(sys.modules[module]).items():
            if id(value) in by_identity:
                patches[(module, attribute)] = recording.wrap(by_identity[id(value)], value)
            elif value is exercises.check:
                patches[(module, attribute)] = recording_check
    checks = {fn: name.removeprefix("check_") for m in modules.values() for name, fn in vars(m).items()
              if name.startswith("check_") and callable(fn)}
    with _patched(patches), contextlib.redirect_stdout(io.StringIO()):
        for recording.verifying in (False, True):
            for check_fn, exercise in checks.items():
                recording.exercise = exercise
                oracle.cases = None
                with exercises.seeded(seed):
                    try:
                        check_fn(_learner(exercise, answers, oracle))
                    except Exception as exc:  # a check that cannot even run here (no GPU, no compiler)
                        recording.incomplete(f"the check raised {type(exc).__name__} while recording: {exc}")
    return recording
