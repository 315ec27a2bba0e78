"""Grade submissions against the reference notebook, through nbval (``mlsys-lab grade``).

Trust nothing in a submission but the source of its exercise cells, and let no code of it near a verdict:

1. The reference (the instructor's executed notebook) names the exercises: each exercise cell
   (solution markers) and the check cell after it (``from mlsys_lab.exercises.<lesson> import check_<name>``).
2. From a submission, only the source of the cell defining each exercise's function is taken
   (found by its ``def`` line; the submission's metadata, check cells and outputs are never read).
3. For each submission a *graded notebook* is written alone in a fresh folder, one segment per attempted
   exercise: a setup cell (arms the worker's guards, starts the exercise's CPU budget), the reference
   cells the exercise needs (:mod:`mlsys_lab.course.dependencies`), the submitted exercise cell, and a
   *serve* cell in place of the check: ``serve("<lesson>", "<exercise>", <function>)``.
4. nbval runs the graded notebooks (``jobs`` pytest processes). Each kernel is a confined worker
   (:mod:`mlsys_lab.course.worker`: Landlock, memory and CPU limits, no child processes) holding one end
   of a socket pair; the plugin :mod:`mlsys_lab.course.nbval_report` holds the other and, while a serve
   cell runs, runs the lesson's check in the pytest process (:mod:`mlsys_lab.course.checks`): cases and
   expected values never enter the worker, only plain data crosses (:mod:`mlsys_lab.course.wire`), and the
   verdict is the check's own ``Verdict`` object. It restarts a killed or hung kernel at the next segment,
   so a crash, an exit, an endless loop or a limit fails that exercise only.

An exercise passes when its cell ran without error and the check, run in the grading process, passed; it is
*not graded* when the grader failed rather than the submission (:mod:`mlsys_lab.course.results`).
Nothing the learner's code prints is read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from tqdm.auto import tqdm

from mlsys_lab.course.checks import lessons
from mlsys_lab.course.dependencies import needed_cells
from mlsys_lab.course.library_answers import LIBRARY_ANSWERS
from mlsys_lab.course.nbval_report import SEGMENT_KEY, SERVE_KEY
from mlsys_lab.course.notebook_cells import (
    Exercise,
    defines_function,
    find_exercises,
    has_solution,
    replace_solutions,
    stdout_text,
)
from mlsys_lab.course.results import ORIGIN_KEY, ExerciseResult, SubmissionResult, segment_result, with_speed_point
from mlsys_lab.exercises import PASS, TODO

NBVAL_MARKER = re.compile(r"^\s*#+\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")
CHECK_IMPORT = re.compile(r"from\s+mlsys_lab\.exercises\.(\w+)\s+import")
SETUP_CELL = """# NBVAL_IGNORE_OUTPUT
import warnings as _warnings
from mlsys_lab.course.worker import start_segment as _start_segment
_warnings.simplefilter("ignore")
_start_segment()
del _warnings, _start_segment"""
SERVE_CELL = """from mlsys_lab.course.worker import serve
serve({lesson!r}, {exercise!r}, {function})"""
DEFAULT_CPU_SECONDS, DEFAULT_MEMORY_MB = 60.0, 4096
KERNEL_START_S = 300  # a kernel's start-up is not the learner's time: wait long on a loaded machine


@dataclass(frozen=True)
class Reference:
    path: Path
    nb: NotebookNode
    exercises: list[Exercise]

    def stub(self, exercise: Exercise) -> str:
        return replace_solutions(self.nb.cells[exercise.exercise_cell].source)


def load_reference(path: Path) -> Reference:
    """Read the instructor's notebook and make sure it can grade: solutions present, ✓ verdicts stored."""
    nb = nbformat.read(path, as_version=4)
    exercises = find_exercises(nb)
    if not exercises:
        raise ValueError(f"reference {path}: no exercise cells (### BEGIN SOLUTION) found")
    for ex in exercises:
        if not has_solution(nb.cells[ex.exercise_cell].source):
            raise ValueError(f"reference {path}: cell {ex.exercise_cell} has no solution; "
                             "pass the instructor's notebook, not a student version")
        check = nb.cells[ex.check_cell]
        stored = stdout_text(check)
        # A kernel exercise executed where no GPU answers stores "… name: needs a CUDA GPU, not graded here (...)".
        elsewhere = stored.startswith(f"{TODO} {ex.name}: needs ") and ", not graded here" in stored
        if check.execution_count is None or not (stored.startswith(f"{PASS} {ex.name}:") or elsewhere):
            raise ValueError(f"reference {path}: check cell {ex.check_cell} has no stored "
                             f"'{PASS} {ex.name}: ...' output; execute the reference notebook first")
    return Reference(Path(path), nb, exercises)


def without_nbval_markers(source: str) -> str:
    """Drop ``# NBVAL_...`` comment lines: in a graded cell only the reference decides what nbval checks."""
    return "".join(line for line in source.splitlines(keepends=True) if not NBVAL_MARKER.match(line))


def submitted_sources(submission: NotebookNode, reference: Reference) -> dict[str, str | None]:
    """For each exercise, the source of the last submitted code cell defining its function (or None)."""
    code = [c.source for c in submission.cells if c.cell_type == "code"]
    found = {ex.name: next((s for s in reversed(code) if defines_function(s, ex.function_name)), None)
             for ex in reference.exercises}
    return {name: None if s is None else without_nbval_markers(s) for name, s in found.items()}


def exercise_segment(reference: Reference, sources: dict[str, str], exercise: Exercise,
                     context: str = "slice") -> list[NotebookNode]:
    """The cells that grade ``exercise``: setup, the context it needs, the submitted cell, the check.

    ``context="slice"`` keeps the reference cells the exercise depends on; ``"all"`` keeps every
    reference cell before it. Another exercise's cell comes in only when this one reads a name it
    defines (a learner's function calling their earlier one), with the submission's source.
    The check cell is the reference's, with its stored ✓ output and execution count (what nbval compares).
    """
    ref_cells = reference.nb.cells
    code = [i for i, c in enumerate(ref_cells) if c.cell_type == "code"]
    by_cell = {ex.exercise_cell: ex for ex in reference.exercises}
    sources_in_order = [sources[by_cell[i].name] if i in by_cell else ref_cells[i].source for i in code]
    learner_cells = frozenset(p for p, i in enumerate(code) if i in by_cell)
    target = code.index(exercise.exercise_cell)
    if context not in ("slice", "all"):
        raise ValueError(f"context must be 'slice' or 'all', got {context!r}")
    # In the order they run: the submitted cell, then the check (the reference's solution, never run, last).
    readers = [sources_in_order[target], ref_cells[exercise.check_cell].source,
               ref_cells[exercise.exercise_cell].source]
    chosen = needed_cells(sources_in_order, target, readers, learner_cells)
    if context == "all":  # every reference cell before it; other learner cells still only when needed
        chosen = sorted(set(chosen) | {p for p in range(target) if p not in learner_cells})
    cells = [nbformat.v4.new_code_cell(SETUP_CELL, metadata={SEGMENT_KEY: exercise.name})]
    cells += [nbformat.v4.new_code_cell(sources_in_order[p], metadata={**ref_cells[code[p]].metadata, ORIGIN_KEY: {
        "cell": code[p], "count": ref_cells[code[p]].get("execution_count"),
        "exercise": by_cell[code[p]].name if code[p] in by_cell else None}}) for p in [*chosen, target]]
    cells.append(serve_cell(reference, exercise))
    return cells


def lesson_of(reference: Reference, exercise: Exercise) -> str:
    """The check module's lesson slug, read from the reference's check cell import."""
    match = CHECK_IMPORT.search(reference.nb.cells[exercise.check_cell].source)
    if match is None:
        raise ValueError(f"reference {reference.path}: check cell {exercise.check_cell} does not import "
                         f"check_{exercise.name} from mlsys_lab.exercises.<lesson>")
    return match.group(1)


def serve_cell(reference: Reference, exercise: Exercise) -> NotebookNode:
    """The cell that replaces the check: the worker answers the grader's calls of the learner's function."""
    lesson = lesson_of(reference, exercise)
    source = SERVE_CELL.format(lesson=lesson, exercise=exercise.name, function=exercise.function_name)
    return nbformat.v4.new_code_cell(source, metadata={SERVE_KEY: {"lesson": lesson, "exercise": exercise.name}})


def graded_notebook(reference: Reference, sources: dict[str, str], exercises: list[Exercise],
                    context: str = "slice") -> tuple[NotebookNode, dict[str, tuple[int, int]]]:
    """One notebook grading ``exercises`` in turn; returns it and each exercise's (exercise, check) cells.

    Each exercise is a segment that starts with a setup cell marked ``SEGMENT_KEY``; the nbval plugin
    starts a fresh kernel there when the previous segment killed or hung the kernel.
    """
    cells: list[NotebookNode] = []
    positions = {}
    for exercise in exercises:
        cells += exercise_segment(reference, sources, exercise, context)
        positions[exercise.name] = (len(cells) - 2, len(cells) - 1)
    return nbformat.v4.new_notebook(cells=cells, metadata=dict(reference.nb.metadata)), positions


def _run_nbval(paths: list[Path], workdir: Path, timeout_s: float, jobs: int,
               check_cells: dict[str, set[int]], show_progress: bool,
               cpu_seconds: float = DEFAULT_CPU_SECONDS,
               memory_mb: int = DEFAULT_MEMORY_MB) -> tuple[list[dict], dict[str, str]]:
    """Run nbval over the notebooks in ``jobs`` pytest processes; return the per-cell records, and why the
    pytest process of a notebook exited abnormally (notebook name -> reason; its records so far still count).

    ``check_cells`` (notebook name -> check cell numbers) drives the progress bar: one step per check.
    """
    (workdir / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    procs = []
    for job in range(min(jobs, len(paths))):
        report = workdir / f"report_{job}.jsonl"
        report.write_text("")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "nbval.plugin", "-p", "no:cacheprovider",
                   "-p", "mlsys_lab.course.nbval_report", "-c", str(workdir / "pytest.ini"),
                   "--rootdir", str(workdir), "--nbval-lax", "--nbval-current-env",
                   f"--nbval-cell-timeout={timeout_s}", f"--nbval-kernel-startup-timeout={KERNEL_START_S}",
                   f"--grading-report={report}", f"--grading-cpu-seconds={cpu_seconds}",
                   f"--grading-memory-mb={memory_mb}", *map(str, paths[job::jobs])]
        log = open(workdir / f"pytest_{job}.log", "w")
        procs.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), report, log))
    total = sum(len(cells) for cells in check_cells.values())
    with tqdm(total=total, desc="grading", unit="exercise", disable=None if show_progress else True) as bar:
        while True:
            running = any(proc.poll() is None for proc, _, _ in procs)
            records = [json.loads(line) for _, report, _ in procs
                       for line in report.read_text(encoding="utf-8").splitlines() if line.endswith("}")]
            bar.update(sum(r["cell"] in check_cells.get(r["notebook"], ()) for r in records) - bar.n)
            if not running:
                break
            time.sleep(0.2)
    crashed: dict[str, str] = {}
    for job, (proc, _, log) in enumerate(procs):
        log.close()
        if proc.returncode not in (0, 1):  # 0: all passed, 1: some failed; anything else is our fault
            tail = Path(log.name).read_text(errors="replace")[-3000:]
            print(f"[grader] pytest exited with code {proc.returncode} while grading; its log ends:\n{tail}",
                  file=sys.stderr)
            why = f"pytest exited with code {proc.returncode} while grading this submission ({Path(log.name).name})"
            crashed.update({path.name: why for path in paths[job::jobs]})
    return records, crashed


def library_answers_named(source: str, exercise: str) -> list[str]:
    """The answering lesson functions (``library_answers.LIBRARY_ANSWERS``) the submitted cell names."""
    found = []
    for target in LIBRARY_ANSWERS.get(exercise, ()):
        module, name = target.split(":")
        if re.search(rf"(?:\.|\bimport\s+|\bimport\s.*,\s*){re.escape(name)}\b", source):  # not the learner's def
            found.append(f"{module}.{name}")
    return found


def speed_point_exercises() -> frozenset[str]:
    """The exercises whose checks are marked :func:`mlsys_lab.exercises.cuda_kernels.speed_point`, in every lesson."""
    return frozenset(name.removeprefix("check_") for module in lessons().values()
                     for name, value in vars(module).items()
                     if name.startswith("check_") and getattr(value, "speed_point", False))


def default_jobs() -> int:
    """One pytest process per CPU core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cell_timeout(timeout_s: float, jobs: int) -> float:
    """The wall-clock limit per cell when ``jobs`` gradings share this machine's cores.

    ``timeout_s`` is what one cell may take on a core of its own. Each job runs two busy processes (the
    pytest process computing the check, the learner's kernel answering it), so with more jobs than cores a
    cell gets a fraction of a core and its wall time stretches by ``jobs / cores``; the limit stretches with
    it, so that the same submission gets the same verdict with ``--jobs 1`` and ``--jobs 12``. (An endless
    loop is still stopped, later; the per-exercise CPU limit does not depend on the load.)
    """
    return timeout_s * max(1.0, jobs / default_jobs())


def _plan(path: Path, reference: Reference, result: SubmissionResult) -> dict[str, str]:
    """Fill in what needs no kernel (unreadable file, exercise not attempted); return the sources to run."""
    try:
        sources = submitted_sources(nbformat.read(path, as_version=4), reference)
    except Exception as exc:  # not a notebook: that submission scores zero, grading goes on
        for ex in reference.exercises:
            result.exercises[ex.name] = ExerciseResult(False, f"could not read the notebook: {exc}")
        return {}
    for ex in reference.exercises:
        source = sources[ex.name]
        if source is None or source.strip() == reference.stub(ex).strip():
            # The stub raises NotImplementedError: its check can only say "not attempted".
            why = "" if source is not None else f" (no cell defines {ex.function_name})"
            result.exercises[ex.name] = ExerciseResult(False, f"{TODO} {ex.name}: not attempted yet{why}")
    return {ex.name: sources[ex.name] or reference.stub(ex) for ex in reference.exercises}


def grade(submissions: list[Path], reference_path: Path, timeout_s: float = 30.0, jobs: int | None = None,
          context: str = "slice", keep: Path | None = None, show_progress: bool = False,
          cpu_seconds: float = DEFAULT_CPU_SECONDS, memory_mb: int = DEFAULT_MEMORY_MB) -> list[SubmissionResult]:
    """Grade every submission against the reference; one :class:`SubmissionResult` per submission.

    Each submission becomes one graded notebook (its attempted exercises, one segment each), alone in
    its own folder, run by nbval in one confined worker kernel that is replaced whenever an exercise
    kills or hangs it. ``timeout_s`` is wall-clock seconds per cell on a core of its own (stretched by
    :func:`cell_timeout` when there are more jobs than cores); ``cpu_seconds`` CPU seconds per exercise and
    ``memory_mb`` the worker's memory (its heap and arrays, ``RLIMIT_DATA``; 0: no limit).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    if cpu_seconds < 0 or memory_mb < 0:
        raise ValueError(f"cpu_seconds and memory_mb must be >= 0 (0: no limit), got {cpu_seconds}, {memory_mb}")
    reference = load_reference(Path(reference_path))
    results = [SubmissionResult(str(s)) for s in submissions]
    graded: list[tuple[SubmissionResult, Path, NotebookNode, dict[str, tuple[int, int]]]] = []
    sources_of: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="mlsys_lab_grade_") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for number, (path, result) in enumerate(zip(submissions, results, strict=True)):
            sources = _plan(Path(path), reference, result)
            sources_of[result.submission] = sources
            to_run = [ex for ex in reference.exercises if sources and ex.name not in result.exercises]
            if to_run:
                nb, positions = graded_notebook(reference, sources, to_run, context)
                folder = workdir / f"submission_{number:03d}"  # the worker sees this folder only
                folder.mkdir()
                target = folder / f"submission_{number:03d}.ipynb"
                nbformat.write(nb, target)
                graded.append((result, target, nb, positions))
        check_cells = {target.name: {c for _, c in positions.values()} for _, target, _, positions in graded}
        jobs = min(jobs or default_jobs(), max(len(graded), 1))
        timeout_s = cell_timeout(timeout_s, jobs)
        records, crashed = _run_nbval([target for _, target, _, _ in graded], workdir, timeout_s, jobs,
                                      check_cells, show_progress, cpu_seconds, memory_mb) if graded else ([], {})
    by_cell = {(r["notebook"], r["cell"]): r for r in records}
    for result, target, nb, positions in graded:
        for name, (ex_cell, check_cell) in positions.items():
            start = max(i for i in range(ex_cell) if nb.cells[i].metadata.get(SEGMENT_KEY) == name)
            records_of = [by_cell.get((target.name, i)) for i in range(start, check_cell + 1)]
            named = library_answers_named(sources_of[result.submission].get(name) or "", name)
            result.exercises[name] = segment_result(nb.cells[start:check_cell + 1], records_of, timeout_s, named,
                                                    crashed.get(target.name, ""))
    timed = speed_point_exercises()
    for result in results:  # exercises in the reference's order; a kernel exercise has its speed point at stake
        result.exercises = {ex.name: with_speed_point(result.exercises[ex.name], ex.name in timed)
                            for ex in reference.exercises}
    return results
