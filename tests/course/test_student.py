"""The student generator (``mlsys-lab student``) and the exercise convention it reads."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course.cli import main
from mlsys_lab.course.dependencies import cell_names, needed_cells
from mlsys_lab.course.notebook_cells import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    find_exercises,
    replace_solutions,
    role_of,
)
from mlsys_lab.course.student import student_version, write_student_versions

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "00_start_here.ipynb"


@pytest.fixture(scope="module")
def reference() -> nbformat.NotebookNode:
    return nbformat.read(LESSON, as_version=4)


@pytest.fixture(scope="module")
def handout(reference) -> nbformat.NotebookNode:
    return student_version(reference)


def lesson_with(*cells: tuple[str, str]) -> nbformat.NotebookNode:
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    return nbformat.v4.new_notebook(cells=[make[kind](source) for kind, source in cells])


def test_the_lesson_has_the_two_warm_up_exercises(reference):
    """Are exercises found by their markers, named after their checks, with the learner's function?"""
    found = [(e.name, e.function_name) for e in find_exercises(reference)]
    assert ("tensor_bytes", "tensor_bytes") in found and ("add_intensity", "add_intensity") in found


def test_solution_regions_are_replaced(reference, handout):
    """Are solution regions replaced by the stub, with the def line and the code around them kept?"""
    for ex in find_exercises(reference):
        solution, stub = reference.cells[ex.exercise_cell].source, handout.cells[ex.exercise_cell].source
        assert BEGIN_SOLUTION not in stub and END_SOLUTION not in stub
        assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in stub
        assert f"def {ex.function_name}(" in stub
        body = solution.split(BEGIN_SOLUTION)[1].split(END_SOLUTION)[0]
        assert all(line.strip() not in stub for line in body.splitlines() if line.strip())
        ast.parse(stub)  # still valid Python
    assert not any(BEGIN_SOLUTION in c.source for c in handout.cells)


def test_stub_keeps_indentation_and_docstring():
    """Does a nested solution region get a stub at its own indentation, keeping the docstring?"""
    source = ('def outer(x):\n    """Double x."""\n    def inner(y):\n        ### BEGIN SOLUTION\n'
              '        return 2 * y\n        ### END SOLUTION\n    return inner(x)\n')
    stub = replace_solutions(source)
    assert stub == ('def outer(x):\n    """Double x."""\n    def inner(y):\n        # YOUR CODE HERE\n'
                    '        raise NotImplementedError()\n    return inner(x)\n')
    assert replace_solutions("x = 1") == "x = 1"


@pytest.mark.parametrize("source", [f"def f():\n    {BEGIN_SOLUTION}\n    return 1\n",
                                    f"def f():\n    return 1\n    {END_SOLUTION}\n"])
def test_unbalanced_markers_are_refused(source):
    """Is a solution region without its other marker an error rather than a leak?"""
    with pytest.raises(ValueError, match="SOLUTION"):
        replace_solutions(source)


def test_exercise_without_check_cell_is_refused():
    """Is an exercise cell not followed by a check cell reported with its cell number?"""
    exercise = f"def f():\n    {BEGIN_SOLUTION}\n    return 1\n    {END_SOLUTION}"
    nb = lesson_with(("markdown", "# L"), ("code", exercise), ("code", "f()"))
    with pytest.raises(ValueError, match="cell 1: an exercise cell must be followed by a check cell"):
        student_version(nb)


def test_leftover_marker_outside_an_exercise_is_refused():
    """Does a stray END SOLUTION marker in another cell stop the generator instead of leaking?"""
    nb = lesson_with(("code", f"x = 1\n{END_SOLUTION}"))
    with pytest.raises(ValueError, match="cell 0: solution markers outside an exercise cell"):
        student_version(nb)


def test_outputs_cleared_only_for_exercises_and_checks(reference, handout):
    """Are exercise and check outputs cleared while the lesson's figures stay for the learner?"""
    roles = {i: role_of(c) for i, c in enumerate(handout.cells)}
    for i, cell in enumerate(handout.cells):
        if cell.cell_type != "code":
            continue
        if roles[i] in ("exercise", "check"):
            assert cell.outputs == [] and cell.execution_count is None
        else:
            assert cell.outputs == reference.cells[i].outputs
    outputs = [o for c in handout.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_roles_recorded_in_metadata(reference, handout):
    """Does the metadata say which cells are exercises and checks, and lock the checks?"""
    for ex in find_exercises(reference):
        recorded = handout.cells[ex.exercise_cell].metadata["mlsys_lab"]
        assert recorded == {"role": "exercise", "exercise": ex.name}
        check = handout.cells[ex.check_cell].metadata
        assert check["mlsys_lab"] == {"role": "check", "exercise": ex.name}
        assert check["editable"] is False and check["deletable"] is False
    assert reference.cells[find_exercises(reference)[0].exercise_cell].metadata.get("mlsys_lab") is None


def test_generator_is_idempotent(tmp_path, capsys):
    """Does running the generator on its own output give the same file, byte for byte?"""
    assert main(["student", str(LESSON), str(tmp_path / "once")]) == 0
    assert main(["student", str(tmp_path / "once"), str(tmp_path / "twice")]) == 0
    once, twice = (tmp_path / d / LESSON.name for d in ("once", "twice"))
    assert once.read_bytes() == twice.read_bytes()
    assert "wrote" in capsys.readouterr().out


def test_folder_mode_and_no_overwrite(tmp_path):
    """Does a folder give one student notebook per lesson, and is the source never overwritten?"""
    src = tmp_path / "course"
    src.mkdir()
    shutil.copy(LESSON, src / LESSON.name)
    written = write_student_versions(src, tmp_path / "out")
    assert [p.name for p in written] == [LESSON.name]
    with pytest.raises(ValueError, match="source notebook itself"):
        write_student_versions(src, src)
    nbformat.write(lesson_with(("code", f"def f():\n    {BEGIN_SOLUTION}\n    return 1\n    {END_SOLUTION}")),
                   src / "99_broken.ipynb")
    with pytest.raises(ValueError, match="99_broken.ipynb: cell 0"):
        write_student_versions(src, tmp_path / "out2")
    assert (tmp_path / "out2" / LESSON.name).exists()  # the good lesson is still written
    assert main(["student", str(tmp_path / "missing"), str(tmp_path / "x")]) == 2


def test_student_version_runs_top_to_bottom(tmp_path, handout):
    """Does the student version pass nbval (each check prints 'not attempted yet', nothing raises)?"""
    path = tmp_path / LESSON.name
    nbformat.write(handout, path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
               "--nbval-current-env", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
               str(path)]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]


def test_cell_names_binds_and_reads():
    """Are globals told apart from parameters and locals, and mutations counted as bindings?"""
    names = cell_names("import numpy as np\nx = np.zeros(3)\nx[0] += k\n"
                       "def f(y):\n    z = y\n    return z + g\n")
    assert names.binds == {"np", "x", "f"}
    assert names.reads == {"np", "x", "k", "g"}  # not f's parameter y or local z, not the builtin print
    assert cell_names("class A:\n    def m(self):\n        return [i * W for i in range(3)]\n").reads == {"W"}
    assert cell_names("from os import *").opaque and cell_names("def broken(:").opaque
    assert cell_names("%matplotlib inline\na = 1").binds == {"a"}


def test_an_augmented_assignment_reads_a_global_only_where_it_is_one():
    """Does ``scale *= 2`` on a function's own local leave the globals alone (it once dragged a slow cell into
    a learner's graded slice), while ``total += 1`` at top level or under ``global total`` still reads total?"""
    assert cell_names("def step(scale):\n    scale *= 2\n    return scale\n").reads == set()
    assert cell_names("total += 1").reads == {"total"}
    assert cell_names("def g():\n    global total\n    total += 1\n").reads == {"total"}
    assert cell_names("for i in range(3):\n    total += i\n").reads >= {"total"}


def test_needed_cells_follow_dependencies():
    """Does the slice keep exactly the cells the target reads, transitively, including mutations?"""
    sources = ["import numpy as np",          # 0 needed through table
               "import matplotlib",            # 1 never read
               "table = np.arange(4)",         # 2 read by the target
               "table[0] = 7",                 # 3 mutates table: needed
               "slow = sum(range(10**6))",     # 4 never read
               "def f(x):\n    return table[x]"]
    assert needed_cells(sources, 5, [sources[5]]) == [0, 2, 3]
    assert needed_cells(sources + ["from m import *"], 6, ["f(1)"]) == [0, 2, 3, 5]
    assert needed_cells(["from m import *", "g = 1"], 2, ["g"], frozenset({0})) == [1]


@pytest.mark.parametrize("lesson", sorted(LESSON.parent.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_committed_handouts_are_the_current_student_versions(lesson):
    """Are the handouts in notebooks/student/ (what the Colab and Binder badges open) made from the lessons as
    they are now? After editing a lesson: ``make execute NB=...`` then ``make student``."""
    committed = LESSON.parent / "student" / lesson.name
    assert committed.exists(), f"{committed} is missing: run make student and commit it"
    expected = nbformat.writes(student_version(nbformat.read(lesson, as_version=4)))
    assert committed.read_text(encoding="utf-8").rstrip("\n") == expected.rstrip("\n"), \
        f"{committed} is stale: run make student"
