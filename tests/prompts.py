"""An exercise's prompt, its hints' code and a namespace like the notebook's: what the prompt tests run.

The prompt of an exercise is the run of markdown cells just above its exercise cell (STYLE.md, "Exercises"):
the spec, one worked example, three collapsed hint tiers ``<details><summary>Hint N · ...</summary>``. A
namespace like the notebook's is what the grader gives a learner's cell: the earlier cells the exercise needs
(:func:`mlsys_lab.course.dependencies.needed_cells`), then the exercise cell itself, executed in this process.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

from mlsys_lab.course.dependencies import needed_cells
from mlsys_lab.course.notebook_cells import BEGIN_SOLUTION, END_SOLUTION, Exercise, find_exercises

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {p.stem: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
HINT = re.compile(r"<details>\s*<summary>\s*Hint ([123])\b[^<]*</summary>(.*?)</details>", re.S)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
GAP = re.compile(r"\.\.\.")


@dataclass(frozen=True)
class Prompt:
    lesson: str  # "06_training_memory"
    exercise: Exercise
    text: str  # the markdown cells above the exercise cell, joined

    def hint_blocks(self) -> list[tuple[int, str]]:
        """``(tier, code)`` of every fenced code block inside a hint, in order."""
        return [(int(tier), code) for tier, body in HINT.findall(self.text) for code in FENCE.findall(body)]

    def without_hints(self) -> str:
        """The spec and the worked example: the prompt with its hint tiers cut out."""
        return HINT.sub("", self.text)


@lru_cache(maxsize=None)
def notebook(lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS[lesson], as_version=4)


def prompts(lesson: str) -> list[Prompt]:
    """Every exercise's prompt in a lesson, in order."""
    nb = notebook(lesson)
    found = []
    for exercise in find_exercises(nb):
        start = exercise.exercise_cell
        while start > 0 and nb.cells[start - 1].cell_type == "markdown":
            start -= 1
        text = "\n".join(nb.cells[i].source for i in range(start, exercise.exercise_cell))
        found.append(Prompt(lesson, exercise, text))
    return found


def all_prompts() -> list[Prompt]:
    return [p for lesson in NOTEBOOKS for p in prompts(lesson)]


def with_body(cell_source: str, *bodies: str) -> str:
    """The exercise cell with its solution regions (markers included) replaced by ``bodies``, one per region in
    order, each indented like its region's BEGIN marker."""
    lines = cell_source.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == BEGIN_SOLUTION]
    ends = [i for i, line in enumerate(lines) if line.strip() == END_SOLUTION]
    if len(starts) != len(bodies) or len(ends) != len(bodies):
        raise ValueError(f"the cell has {len(starts)} solution regions, {len(bodies)} bodies were given")
    out, previous_end = [], -1
    for start, end, body in zip(starts, ends, bodies, strict=True):
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        out += lines[previous_end + 1:start]
        out += [f"{indent}{line}\n" if line.strip() else "\n" for line in body.splitlines()]
        previous_end = end
    return "".join(out + lines[previous_end + 1:])


def exercise_namespace(prompt: Prompt, cell_source: str | None = None) -> dict:
    """Run what the grader runs before the check, in this process: the cells the exercise needs, then the
    exercise cell (``cell_source`` in place of the solved one if given). Returns the namespace; output is
    swallowed, the working directory is the notebooks' folder as under nbval."""
    nb = notebook(prompt.lesson)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    sources = [nb.cells[i].source for i in code]
    exercise_cells = frozenset(code.index(e.exercise_cell) for e in find_exercises(nb))
    target = code.index(prompt.exercise.exercise_cell)
    if cell_source is not None:
        sources[target] = cell_source
    check_source = nb.cells[prompt.exercise.check_cell].source
    chosen = needed_cells(sources, target, [sources[target], check_source], exercise_cells)
    namespace: dict = {"__name__": "__main__"}
    transform = TransformerManager().transform_cell
    previous = Path.cwd()
    os.chdir(NOTEBOOKS[prompt.lesson].parent)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for position in [*chosen, target]:
                exec(compile(transform(sources[position]), f"<{prompt.lesson} cell {code[position]}>", "exec"),
                     namespace)
    finally:
        os.chdir(previous)
    return namespace


def run_check(prompt: Prompt, namespace: dict) -> str:
    """The verdict line(s) the exercise's own check cell prints for the function in ``namespace``."""
    nb = notebook(prompt.lesson)
    source = nb.cells[prompt.exercise.check_cell].source
    out = io.StringIO()
    previous = Path.cwd()
    os.chdir(NOTEBOOKS[prompt.lesson].parent)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"<{prompt.lesson} check {prompt.exercise.name}>", "exec"), namespace)
    finally:
        os.chdir(previous)
    return out.getvalue()
