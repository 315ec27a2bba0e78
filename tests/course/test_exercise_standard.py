"""Every exercise meets the course's standard (STYLE.md, "Exercises"), checked on the source tree.

* its check is proved by a catalogue of wrong implementations in ``tests/<slug>/test_exercise_catalogue.py``
  (at least five; ``tests/catalogue.py`` runs each on 50 seeds), or ``test_cuda_exercise_catalogue.py`` for a
  kernel in CUDA C (``tests/cuda_catalogue.py``: on a GPU);
* its prompt, in the markdown cells just above the exercise cell, gives a worked example and three collapsed
  hint tiers: ``<details><summary>Hint 1 · ...``, ``Hint 2 · ...``, ``Hint 3 · ...`` (a nudge, the method,
  nearly the answer).

Lessons still being brought to the standard are listed, per requirement, in ``CATALOGUES_IN_PROGRESS`` and
``PROMPTS_IN_PROGRESS``; their tests are expected to fail (strict: once a lesson meets a requirement, its entry
must go).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from catalogue import MIN_WRONG

from mlsys_lab.course.checks import lessons
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.exercises import WARM_UPS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {p.stem.split("_", 1)[1]: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
CATALOGUES_IN_PROGRESS: set[str] = set()
PROMPTS_IN_PROGRESS: set[str] = set()
HINT = re.compile(r"<summary>\s*Hint ([123])\b")
EXAMPLE = re.compile(r"\b(example|for instance|e\.g\.)|>>>", re.IGNORECASE)
WARM_UP_MARK = re.compile(r"\(warm-up\)|\*\*\d+\.\d+ Warm-up: ")
MIN_BUILDS = 3  # build exercises per lesson, 01 to 11 (00 is warm-ups, the capstone builds on the others)


def lesson_param(slug: str, in_progress: set[str]):
    marks = [pytest.mark.xfail(strict=True, reason="lesson not yet at the exercise standard")] \
        if slug in in_progress else []
    return pytest.param(slug, marks=marks, id=slug)


def catalogues_of(slug: str) -> dict:
    """The catalogues of a lesson: ``test_exercise_catalogue.py``, and ``test_cuda_*catalogue.py`` for its kernels
    in CUDA C (run where a GPU answers)."""
    found = {}
    for path in sorted((ROOT / "tests" / slug).glob("test_*catalogue.py")):
        spec = importlib.util.spec_from_file_location(f"catalogue_of_{slug}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found.update({c.name: c for c in getattr(module, "CATALOGUES", [])})
    return found


@pytest.mark.parametrize("slug", [lesson_param(s, CATALOGUES_IN_PROGRESS) for s in NOTEBOOKS])
def test_every_check_has_its_catalogue(slug):
    checks = sorted(name.removeprefix("check_") for name in dir(lessons()[slug]) if name.startswith("check_"))
    catalogues = catalogues_of(slug)
    missing = [name for name in checks if name not in catalogues]
    thin = [name for name, c in catalogues.items() if len(c.wrong) < MIN_WRONG]
    assert not missing, f"{slug}: no wrong-answer catalogue for {missing}"
    assert not thin, f"{slug}: fewer than {MIN_WRONG} wrong implementations for {thin}"


@pytest.mark.parametrize("slug", [lesson_param(s, PROMPTS_IN_PROGRESS) for s in NOTEBOOKS])
def test_every_exercise_has_an_example_and_three_hints(slug):
    nb = nbformat.read(NOTEBOOKS[slug], as_version=4)
    problems = []
    for exercise in find_exercises(nb):
        start = exercise.exercise_cell
        while start > 0 and nb.cells[start - 1].cell_type == "markdown":
            start -= 1
        prompt = "\n".join(nb.cells[i].source for i in range(start, exercise.exercise_cell))
        tiers = sorted(set(HINT.findall(prompt)))
        if tiers != ["1", "2", "3"]:
            problems.append(f"{exercise.name}: hint tiers {tiers or 'none'} (want 1, 2, 3 in <details>)")
        if not EXAMPLE.search(prompt):
            problems.append(f"{exercise.name}: no worked example in the prompt")
    assert not problems, "\n".join(problems)


def prompt_of(nb, exercise) -> str:
    """The markdown cells just above an exercise's cell: its prompt, worked example and hints."""
    start = exercise.exercise_cell
    while start > 0 and nb.cells[start - 1].cell_type == "markdown":
        start -= 1
    return "\n".join(nb.cells[i].source for i in range(start, exercise.exercise_cell))


@pytest.mark.parametrize("slug", list(NOTEBOOKS))
def test_warm_ups_are_marked_and_every_lesson_builds(slug):
    """A warm-up (a formula transcribed) says so in its prompt, a build does not; lessons 01-11 build at least
    three mechanisms each beside their warm-ups."""
    nb = nbformat.read(NOTEBOOKS[slug], as_version=4)
    exercises = find_exercises(nb)
    wrong = [f"{e.name}: {'not marked (warm-up)' if e.name in WARM_UPS else 'marked a warm-up, but is a build'}"
             for e in exercises if bool(WARM_UP_MARK.search(prompt_of(nb, e))) != (e.name in WARM_UPS)]
    assert not wrong, "\n".join(wrong)
    builds = [e.name for e in exercises if e.name not in WARM_UPS]
    if slug not in ("start_here", "capstone"):
        assert len(builds) >= MIN_BUILDS, f"{slug} builds only {builds}"


CHECK_MODULE_PARTS = {"cuda", "mma_cuda", "references", "failures", "kill", "resume", "ddp", "fsdp"}
SHARED_CHECK_MODULES = {"__init__", "cuda_kernels"}


def test_check_modules_are_named_by_lesson_and_what_they_check():
    """``exercises/<slug>.py``, or ``<slug>_<what>.py`` with a part ARCHITECTURE.md names (never ``_build``)."""
    names = [p.stem for p in (ROOT / "mlsys_lab" / "exercises").glob("*.py") if p.stem not in SHARED_CHECK_MODULES]
    wrong = []
    for name in names:
        slug = max((s for s in NOTEBOOKS if name == s or name.startswith(s + "_")), key=len, default=None)
        part = name[len(slug) + 1:] if slug else None
        if slug is None or (part and part not in CHECK_MODULE_PARTS):
            wrong.append(name)
    assert not wrong, f"check modules named by neither lesson nor a part ARCHITECTURE.md lists: {wrong}"
