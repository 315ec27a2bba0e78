"""No lesson function answers an exercise unnoticed: every one that passes a check as it is, is flagged.

A learner may call the library the lesson imports. Where a lesson function *is* the answer (``expected_goodput``
passes the goodput check in one line), the grader flags its use (``course/library_answers.py``). This test finds
such functions instead of trusting a hand-made list: for every exercise, each public function of the lesson's
own package and of the floor whose positional parameters fit the exercise's signature is handed to the check as
the learner's function, as it is; each one that passes must be listed for that exercise.

Functions that need a GPU, run processes, write files or reach the network are left out, as the fuzz suite leaves
them out (``tests/fuzz/harness.py``); each call runs under a time limit, in a scratch folder.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nbformat
import pytest
from catalogue import verdict
from fuzz import harness

from mlsys_lab.course.checks import lessons
from mlsys_lab.course.library_answers import LIBRARY_ANSWERS
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.exercises import PASS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {p.stem.split("_", 1)[1]: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
FLOOR = ("mlsys_lab.nn", "mlsys_lab.units", "mlsys_lab.hardware", "mlsys_lab.timing", "mlsys_lab.cpu")
SEED = 0
CALL_LIMIT_S = 5.0


def exercise_arities(slug: str) -> dict[str, int]:
    """{exercise: the number of positional parameters of the function the learner writes} for a lesson."""
    nb = nbformat.read(NOTEBOOKS[slug], as_version=4)
    found = {}
    for ex in find_exercises(nb):
        tree = ast.parse(nb.cells[ex.exercise_cell].source)
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ex.function_name]
        if defs:
            found[ex.name] = len(defs[0].args.posonlyargs) + len(defs[0].args.args)
    return found


def candidates(slug: str) -> dict[str, object]:
    """Public functions of the lesson's own package and of the floor (not left out by the fuzz suite)."""
    targets = harness.discover()
    return {name: fn for name, fn in targets.items() if inspect.isfunction(fn)
            and (name.startswith(f"mlsys_lab.{slug}.") or name.rsplit(".", 1)[0] in FLOOR)}


def fits(fn, n: int) -> bool:
    """Can ``fn`` be called with ``n`` positional arguments and nothing else?"""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    return True


def as_listed(qualified: str) -> str:
    module, _, name = qualified.rpartition(".")
    return f"{module}:{name}"


@pytest.mark.exhaustive
@pytest.mark.parametrize("slug", [s for s in NOTEBOOKS if s not in ("capstone",)])
def test_every_lesson_function_that_passes_a_check_is_flagged(slug, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checks = lessons()[slug]
    arities = exercise_arities(slug)
    pool = candidates(slug)
    unlisted = []
    with harness.limits():
        for exercise, n in arities.items():
            check = getattr(checks, f"check_{exercise}", None)
            if check is None:
                continue
            listed = set(LIBRARY_ANSWERS.get(exercise, ()))
            for qualified, fn in pool.items():
                if not fits(fn, n) or as_listed(qualified) in listed:
                    continue
                status, outcome = harness.timed_call(lambda fn=fn, check=check: verdict(check, fn, SEED), {},
                                                     CALL_LIMIT_S)
                if status == "ok" and outcome.status == PASS:
                    unlisted.append(f"{exercise}: {as_listed(qualified)} passes its check as it is")
    assert not unlisted, ("lesson functions that answer an exercise, not in course/library_answers.py:\n"
                          + "\n".join(unlisted))


def test_every_listed_answer_exists():
    """Each ``module:function`` of the list names a real function (a rename must not silently unflag it)."""
    import importlib

    missing = []
    for exercise, targets in LIBRARY_ANSWERS.items():
        for target in targets:
            module, name = target.split(":")
            if not callable(getattr(importlib.import_module(module), name, None)):
                missing.append(f"{exercise}: {target}")
    assert not missing, missing
