"""Student versions of the course notebooks: solutions out, stubs in (``mlsys-lab student SRC OUT``).

The generator is a pipeline of small steps, each a function that edits a notebook in place, listed
in :data:`PIPELINE`. Ordering rules:

- ``record_roles`` runs first: the steps after it find exercise and check cells through the roles it
  writes into the metadata, because once solutions are replaced the markers are gone.
- ``replace_solution_regions`` runs before ``refuse_leftover_solutions``, which is the last word.

Running the generator on its own output gives the same file (the roles are found again from the
metadata, the stubs contain no markers, cleared outputs stay cleared).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import nbformat
from nbformat import NotebookNode

from mlsys_lab.course.execute import notebook_paths
from mlsys_lab.course.notebook_cells import (
    BEGIN_SOLUTION,
    CHECK,
    END_SOLUTION,
    EXERCISE,
    METADATA_KEY,
    find_exercises,
    replace_solutions,
    role_of,
)

Step = Callable[[NotebookNode], None]


def record_roles(nb: NotebookNode) -> None:
    """Write each exercise's and check's role and name into its cell metadata; lock the check cells.

    ``editable``/``deletable`` are the standard Jupyter cell-metadata flags: JupyterLab will not let
    the learner edit or delete a check cell (the grader ignores edits anyway).
    """
    for exercise in find_exercises(nb):
        ex_cell, check_cell = nb.cells[exercise.exercise_cell], nb.cells[exercise.check_cell]
        ex_cell.metadata[METADATA_KEY] = {"role": EXERCISE, "exercise": exercise.name}
        ex_cell.metadata["deletable"] = False
        check_cell.metadata[METADATA_KEY] = {"role": CHECK, "exercise": exercise.name}
        check_cell.metadata["deletable"] = False
        check_cell.metadata["editable"] = False


def replace_solution_regions(nb: NotebookNode) -> None:
    """Replace each solution region by ``# YOUR CODE HERE`` and ``raise NotImplementedError()``."""
    for cell in nb.cells:
        if role_of(cell) == EXERCISE:
            cell.source = replace_solutions(cell.source)


def clear_exercise_outputs(nb: NotebookNode) -> None:
    """Clear outputs and execution counts of exercise and check cells; other outputs stay (figures)."""
    for cell in nb.cells:
        if role_of(cell) in (EXERCISE, CHECK):
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)  # nbclient's timestamps of the reference run


def refuse_leftover_solutions(nb: NotebookNode) -> None:
    """Fail loudly if a solution marker survives anywhere (e.g. in a cell that is not an exercise)."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (BEGIN_SOLUTION in cell.source or END_SOLUTION in cell.source):
            raise ValueError(f"cell {index}: solution markers outside an exercise cell")


PIPELINE: tuple[Step, ...] = (
    record_roles,
    replace_solution_regions,
    clear_exercise_outputs,
    refuse_leftover_solutions,
)


def student_version(nb: NotebookNode, pipeline: tuple[Step, ...] = PIPELINE) -> NotebookNode:
    """A student copy of ``nb`` (the input is not modified)."""
    out = nbformat.from_dict(nb)
    for step in pipeline:
        step(out)
    return out


def write_student_versions(src: Path, out: Path) -> list[Path]:
    """Write student versions of one notebook or of every notebook in a folder; returns the paths written.

    With a folder, or an ``out`` that is not an ``.ipynb`` file, ``out`` is a folder and each notebook
    keeps its name. Refuses to overwrite its own input. A notebook that breaks the exercise convention
    is skipped and named in the ValueError raised after the others are written.
    """
    written, problems = [], []
    for path in notebook_paths(src):
        target = out if (src.is_file() and out.suffix == ".ipynb") else out / path.name
        if target.resolve() == path.resolve():
            raise ValueError(f"out: {target} is the source notebook itself; choose another folder")
        try:
            student = student_version(nbformat.read(path, as_version=4))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(student, target)
        written.append(target)
    if problems:
        raise ValueError("no student version for:\n  " + "\n  ".join(problems))
    return written
