"""The exercise convention of the course notebooks, read from cells.

An exercise is a code cell whose solution sits between markers, followed by its check cell:

    def tensor_bytes(shape, dtype):            # exercise cell
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    # NBVAL_CHECK_OUTPUT                        # check cell (the very next code cell)
    from mlsys_lab.exercises.start_here import check_tensor_bytes
    check_tensor_bytes(tensor_bytes)

The exercise's name is the check function's name without ``check_``; the learner's function is
the argument of that call. The student generator records both roles in the cells' metadata
(``metadata.mlsys_lab = {"role": "exercise" | "check", "exercise": name}``), so a cell whose
solution was already replaced is still recognised (this makes the generator idempotent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nbformat import NotebookNode

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
CHECK_MARKER = "# NBVAL_CHECK_OUTPUT"
STUB_LINES = ("# YOUR CODE HERE", "raise NotImplementedError()")
METADATA_KEY = "mlsys_lab"
EXERCISE, CHECK = "exercise", "check"

CHECK_CALL = re.compile(r"^\s*check_(\w+)\(\s*([A-Za-z_]\w*)\s*\)", re.MULTILINE)


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: its name, the learner's function, and where its two cells are."""

    name: str  # "tensor_bytes": the check is check_tensor_bytes
    function_name: str  # the function the check calls
    exercise_cell: int  # index into nb.cells
    check_cell: int  # index into nb.cells


def has_solution(source: str) -> bool:
    return BEGIN_SOLUTION in source


def role_of(cell: NotebookNode) -> str | None:
    """The role recorded in the cell's metadata by the student generator, if any."""
    return cell.get("metadata", {}).get(METADATA_KEY, {}).get("role")


def is_check_source(source: str) -> bool:
    lines = source.lstrip().splitlines()
    return bool(lines) and lines[0].strip() == CHECK_MARKER and CHECK_CALL.search(source) is not None


def replace_solutions(source: str) -> str:
    """Replace every BEGIN/END SOLUTION region (markers included) by the student stub.

    The stub keeps the indentation of the BEGIN marker, so the code around it (the ``def`` line, the
    docstring) stays valid. A source without markers comes back unchanged.
    """
    out: list[str] = []
    indent: str | None = None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if stripped == BEGIN_SOLUTION:
            if indent is not None:
                raise ValueError(f"line {number}: {BEGIN_SOLUTION} inside another solution region")
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(f"{indent}{stub}\n" for stub in STUB_LINES)
        elif stripped == END_SOLUTION:
            if indent is None:
                raise ValueError(f"line {number}: {END_SOLUTION} without {BEGIN_SOLUTION}")
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise ValueError(f"{BEGIN_SOLUTION} without {END_SOLUTION}")
    text = "".join(out)
    return text if source.endswith("\n") else text.removesuffix("\n")


def find_exercises(nb: NotebookNode) -> list[Exercise]:
    """The exercises of a notebook, in order, found by markers or recorded roles.

    Raises ValueError when an exercise cell is not followed by a check cell, or a name repeats.
    """
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    exercises: list[Exercise] = []
    for position, index in enumerate(code):
        cell = nb.cells[index]
        if not (has_solution(cell.source) or role_of(cell) == EXERCISE):
            continue
        following = code[position + 1] if position + 1 < len(code) else None
        if following is None or not is_check_source(nb.cells[following].source):
            raise ValueError(f"cell {index}: an exercise cell must be followed by a check cell starting "
                             f"with '{CHECK_MARKER}' that calls check_<name>(function)")
        match = CHECK_CALL.search(nb.cells[following].source)
        name, function_name = match.group(1), match.group(2)
        if any(e.name == name for e in exercises):
            raise ValueError(f"cell {following}: exercise '{name}' is checked twice")
        exercises.append(Exercise(name, function_name, index, following))
    return exercises


def defines_function(source: str, function_name: str) -> bool:
    """Does the cell define ``function_name`` at top level? (Text match: works on broken code too.)"""
    pattern = rf"^(?:async\s+)?def\s+{re.escape(function_name)}\s*\("
    return re.search(pattern, source, re.MULTILINE) is not None


def stdout_text(cell: NotebookNode) -> str:
    """Everything a code cell printed on stdout, as stored in the notebook."""
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
