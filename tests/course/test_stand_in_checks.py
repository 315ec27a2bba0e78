"""While grading, ``mlsys_lab.exercises`` is a stand-in in the worker: do the cells the grader runs need nothing else
from it, and does a deeper import fail as an ImportError rather than hand the learner a module to call?

A helper the learner's launcher calls (a shape check, a launch wrapper) must live in a lesson's package: imported
from a check module, it would be a stand-in in the worker and the exercise would fail only when graded."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mlsys_lab.course.grade import graded_notebook, load_reference, submitted_sources

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PACKAGE = "mlsys_lab.exercises"


def imports_from_checks(source: str) -> list[str]:
    """The names a cell imports from ``mlsys_lab.exercises`` or a module of it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: such cells import nothing from the checks
        return []
    return [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
            and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")) for alias in node.names]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_graded_cells_import_only_checks_from_the_checks(lesson):
    reference = load_reference(lesson)
    sources = submitted_sources(reference.nb, reference)
    notebook, _ = graded_notebook(reference, sources, reference.exercises)
    found = {name for cell in notebook.cells for name in imports_from_checks(cell.source)
             if not name.startswith("check_")}
    assert not found, (f"{lesson.stem}: graded cells import {sorted(found)} from {PACKAGE}, a stand-in while grading; "
                       "move them to the lesson's package")


def test_stand_in_serves_checks_and_refuses_helpers():
    program = """
from mlsys_lab.course import stand_in_checks
stand_in_checks.install()
from mlsys_lab.exercises.memory_hierarchy_mma_cuda import check_bf16_mma_cuda
check_bf16_mma_cuda(print)
try:
    from mlsys_lab.exercises.memory_hierarchy_mma_cuda import mma_shapes
except ImportError as exc:
    print("ImportError:", exc)
else:
    print("imported", type(mma_shapes).__name__)
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, check=True)
    lines = result.stdout.splitlines()
    assert lines[0] == "… bf16_mma_cuda: checked by the grader, not in your cell, while grading"
    assert lines[1].startswith("ImportError: cannot import name 'mma_shapes'"), lines
