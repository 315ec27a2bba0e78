"""Grade submissions against the reference notebook, through nbval (``mlsys-lab grade``).

Trust nothing in a submission but the source of its exercise cells:

1. The reference (the instructor's executed notebook) names the exercises: each exercise cell
   (solution markers) and the check cell after it, whose stored output is the ✓ verdict line.
2. From a submission, only the source of the cell defining each exercise's function is taken
   (found by its ``def`` line; the submission's metadata, check cells and outputs are never read).
3. For every exercise a *graded notebook* is built from the reference: the cells the exercise
   needs (:mod:`mlsys_lab.course.dependencies`), the submitted exercise cell, and the reference's
   check cell with its stored ✓ output.
4. nbval runs the graded notebooks, one fresh kernel each, with a per-cell timeout, comparing the
   check cell's output with the reference's ✓ line. An infinite loop, a crash of the kernel,
   ``sys.exit`` or a syntax error fails that exercise only. Notebooks are spread over ``jobs``
   pytest processes.

An exercise passes when its cell runs without error and its check prints exactly the reference's
verdict (lines the learner's code prints itself are ignored: only verdict lines are compared).
Known limit: the learner's code runs in the same process as the check, so code written to patch
the checker could fake a pass; grading guards against edited cells, outputs and metadata.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from tqdm.auto import tqdm

from mlsys_lab.course.dependencies import needed_cells
from mlsys_lab.course.notebook_cells import (
    Exercise,
    defines_function,
    find_exercises,
    has_solution,
    replace_solutions,
    stdout_text,
)
from mlsys_lab.exercises import PASS, TODO

# nbval compares the check cell's stdout after this substitution on both sides: everything but
# verdict lines (✓ ✗ …) is dropped, so a learner's debugging print does not cost the point.
VERDICT_ONLY = "regex: (?m)^(?![✓✗…] ).*(?:\\n|$)\nreplace: \n"
SETUP_CELL = """# NBVAL_IGNORE_OUTPUT
import os as _os, warnings as _warnings
_os.chdir({cwd!r})
_warnings.simplefilter("ignore")
del _os, _warnings"""


@dataclass(frozen=True)
class ExerciseResult:
    passed: bool
    message: str


@dataclass
class SubmissionResult:
    submission: str
    exercises: dict[str, ExerciseResult] = field(default_factory=dict)

    @property
    def score(self) -> int:
        return sum(r.passed for r in self.exercises.values())

    @property
    def max_score(self) -> int:
        return len(self.exercises)

    def to_json(self) -> dict:
        return {"submission": self.submission, "score": self.score, "max_score": self.max_score,
                "exercises": {name: {"passed": r.passed, "message": r.message}
                              for name, r in self.exercises.items()}}


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
        if check.execution_count is None or not stdout_text(check).startswith(f"{PASS} {ex.name}:"):
            raise ValueError(f"reference {path}: check cell {ex.check_cell} has no stored "
                             f"'{PASS} {ex.name}: ...' output; execute the reference notebook first")
    return Reference(Path(path), nb, exercises)


def submitted_sources(submission: NotebookNode, reference: Reference) -> dict[str, str | None]:
    """For each exercise, the source of the last submitted code cell defining its function (or None)."""
    code = [c.source for c in submission.cells if c.cell_type == "code"]
    return {ex.name: next((s for s in reversed(code) if defines_function(s, ex.function_name)), None)
            for ex in reference.exercises}


def graded_notebook(reference: Reference, sources: dict[str, str], exercise: Exercise,
                    context: str = "slice") -> NotebookNode:
    """The reference notebook cut down to what grading ``exercise`` needs, with submitted sources.

    ``context="slice"`` keeps the cells the exercise depends on; ``"all"`` keeps every code cell
    before it. Other exercises' cells carry the submission's sources, as in the learner's notebook.
    """
    ref_cells = reference.nb.cells
    code = [i for i, c in enumerate(ref_cells) if c.cell_type == "code"]
    by_cell = {ex.exercise_cell: ex for ex in reference.exercises}
    sources_in_order = [sources[by_cell[i].name] if i in by_cell else ref_cells[i].source for i in code]
    learner_cells = frozenset(p for p, i in enumerate(code) if i in by_cell)
    target = code.index(exercise.exercise_cell)
    check = code.index(exercise.check_cell)
    if context == "all":
        chosen = list(range(target))
    elif context == "slice":
        readers = [sources_in_order[target], ref_cells[exercise.exercise_cell].source,
                   ref_cells[exercise.check_cell].source]
        chosen = needed_cells(sources_in_order, target, readers, learner_cells)
    else:
        raise ValueError(f"context must be 'slice' or 'all', got {context!r}")

    def plain(source: str, metadata: dict) -> NotebookNode:
        return nbformat.v4.new_code_cell(source, metadata=dict(metadata))

    cells = [plain(SETUP_CELL.format(cwd=str(reference.path.parent.resolve())), {})]
    cells += [plain(sources_in_order[p], ref_cells[code[p]].metadata) for p in [*chosen, target]]
    cells.append(nbformat.from_dict(ref_cells[code[check]]))  # stored ✓ output and execution count
    return nbformat.v4.new_notebook(cells=cells, metadata=dict(reference.nb.metadata))


def _run_nbval(paths: list[Path], workdir: Path, timeout_s: float, jobs: int,
               show_progress: bool) -> list[dict]:
    """Run nbval over the notebooks in ``jobs`` pytest processes; return the per-cell records."""
    (workdir / "pytest.ini").write_text("[pytest]\n")
    sanitize = workdir / "verdict_only.cfg"
    sanitize.write_text(VERDICT_ONLY, encoding="utf-8")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    procs = []
    for job in range(min(jobs, len(paths))):
        chunk = [str(p) for p in paths[job::jobs]]
        report = workdir / f"report_{job}.jsonl"
        report.touch()
        command = [sys.executable, "-m", "pytest", "-q", "-p", "nbval.plugin", "-p",
                   "mlsys_lab.course.nbval_report", "-p", "no:cacheprovider", "-c", str(workdir / "pytest.ini"),
                   "--rootdir", str(workdir), "--nbval-lax", "--nbval-current-env",
                   f"--nbval-cell-timeout={timeout_s}", f"--nbval-sanitize-with={sanitize}",
                   f"--grading-report={report}", *chunk]
        log = open(workdir / f"pytest_{job}.log", "w")
        procs.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), report, log))
    last_cells = {p.name: len(nbformat.read(p, as_version=4).cells) - 1 for p in paths}
    with tqdm(total=len(paths), desc="grading", unit="exercise", disable=not show_progress) as bar:
        while True:
            running = any(proc.poll() is None for proc, _, _ in procs)
            done = sum(1 for _, report, _ in procs for line in report.read_text(encoding="utf-8").splitlines()
                       if line.endswith("}") and _is_last(json.loads(line), last_cells))
            bar.update(done - bar.n)
            if not running:
                break
            time.sleep(0.2)
    records = []
    for proc, report, log in procs:
        log.close()
        if proc.returncode not in (0, 1):
            tail = Path(log.name).read_text()[-3000:]
            raise RuntimeError(f"pytest exited with code {proc.returncode} while grading:\n{tail}")
        records += [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
    return records


def _is_last(record: dict, last_cells: dict[str, int]) -> bool:
    return record["when"] == "call" and record["cell"] == last_cells.get(record["notebook"])


def _timeout_text(message: str, timeout_s: float) -> str:
    return f"timed out after {timeout_s:g} s" if message.startswith("Timeout") else message


def _exercise_result(ex: Exercise, records: dict[int, dict], n_cells: int, timeout_s: float) -> ExerciseResult:
    """Read one graded notebook's records: exercise cell is second to last, check cell last."""
    ex_record, check_record = records.get(n_cells - 2), records.get(n_cells - 1)
    if ex_record is None or check_record is None:
        return ExerciseResult(False, "grading did not finish this exercise")
    if not ex_record["passed"]:
        return ExerciseResult(False, f"exercise cell: {_timeout_text(ex_record['message'], timeout_s)}")
    verdicts = [line for line in check_record["stdout"].splitlines() if line[:1] in "✓✗…"]
    if check_record["passed"]:
        return ExerciseResult(True, verdicts[-1] if verdicts else f"{PASS} {ex.name}")
    if verdicts:
        return ExerciseResult(False, verdicts[-1])
    return ExerciseResult(False, f"check cell: {_timeout_text(check_record['message'], timeout_s)}")


def default_jobs() -> int:
    """One pytest process per CPU core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def grade(submissions: list[Path], reference_path: Path, timeout_s: float = 30.0, jobs: int | None = None,
          context: str = "slice", keep: Path | None = None, show_progress: bool = False) -> list[SubmissionResult]:
    """Grade every submission against the reference; one :class:`SubmissionResult` per submission."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    reference = load_reference(Path(reference_path))
    jobs = jobs or default_jobs()
    results = [SubmissionResult(str(s)) for s in submissions]
    plan: list[tuple[SubmissionResult, Exercise, Path, int]] = []
    with tempfile.TemporaryDirectory(prefix="mlsys_lab_grade_") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for number, (path, result) in enumerate(zip(submissions, results)):
            try:
                sources = submitted_sources(nbformat.read(path, as_version=4), reference)
            except Exception as exc:  # unreadable file: that submission scores zero, grading goes on
                for ex in reference.exercises:
                    result.exercises[ex.name] = ExerciseResult(False, f"could not read the notebook: {exc}")
                continue
            filled = {ex.name: sources[ex.name] or reference.stub(ex) for ex in reference.exercises}
            for ex in reference.exercises:
                source = sources[ex.name]
                if source is None or source.strip() == reference.stub(ex).strip():
                    # The stub raises NotImplementedError: its check can only say "not attempted".
                    why = "" if source is not None else f" (no cell defines {ex.function_name})"
                    result.exercises[ex.name] = ExerciseResult(False, f"{TODO} {ex.name}: not attempted yet{why}")
                    continue
                nb = graded_notebook(reference, filled, ex, context)
                target = workdir / f"s{number:03d}_{ex.name}.ipynb"
                nbformat.write(nb, target)
                plan.append((result, ex, target, len(nb.cells)))
        records = _run_nbval([p for _, _, p, _ in plan], workdir, timeout_s, jobs, show_progress) if plan else []
    by_notebook: dict[str, dict[int, dict]] = {}
    for record in records:
        by_notebook.setdefault(record["notebook"], {})[record["cell"]] = record
    for result, ex, target, n_cells in plan:
        result.exercises[ex.name] = _exercise_result(ex, by_notebook.get(target.name, {}), n_cells, timeout_s)
    for result in results:  # exercises in the reference's order
        result.exercises = {ex.name: result.exercises[ex.name] for ex in reference.exercises}
    return results
