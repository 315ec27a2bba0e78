"""Does a learner's piece carry forward: kept when its check passes, run by later lessons, named when it fails?"""

from __future__ import annotations

import linecache
import subprocess
import sys

import pytest

from mlsys_lab import pieces

CELL = '''import numpy as np

SCALE = 2.0


def double_all(values):
    ### BEGIN SOLUTION
    return [SCALE * np.asarray(v) for v in values]
    ### END SOLUTION
'''


def _cell_function(source: str, name: str, number: int = 1, earlier_cells: dict | None = None):
    """Define ``name`` as IPython does: from a cell whose text linecache holds under a file name of its own
    (``earlier_cells``: names that other cells of the notebook defined)."""
    filename = f"/tmp/ipykernel_0/{number:04d}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = dict(earlier_cells or {})
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(pieces.STORE_ENV, str(tmp_path / "pieces"))
    return tmp_path / "pieces"


def course_double_all(values):
    return [2.0 * v for v in values]


def test_a_kept_piece_is_what_a_later_lesson_runs_and_it_says_so(capsys):
    fn = _cell_function(CELL, "double_all")
    assert pieces.keep("double_all", fn, "07 collectives") is not None
    used = pieces.piece("double_all", course=course_double_all)
    assert "double_all: yours (lesson 07 collectives, checked" in capsys.readouterr().out
    assert used([1.0, 3.0]) == [2.0, 6.0] and getattr(used, "is_yours", False)


def test_without_a_piece_the_course_runs_and_it_says_so(capsys):
    assert pieces.piece("double_all", course=course_double_all) is course_double_all
    assert "double_all: the course's (yours is not written yet)" in capsys.readouterr().out


def test_a_piece_survives_a_kernel_restart(store):
    pieces.keep("double_all", _cell_function(CELL, "double_all"), "07 collectives")
    code = ("from mlsys_lab import pieces\nf = pieces.piece('double_all', course=print)\n"
            "print(float(f([1.5])[0]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, pieces.STORE_ENV: str(store)})
    assert "double_all: yours" in done.stdout and done.stdout.strip().endswith("3.0"), done.stdout + done.stderr


def test_a_piece_that_does_not_load_is_named_and_the_course_runs(capsys):
    needs_another_cell = "def double_all(values):\n    return [HELPER(v) for v in values]\n\nHELPER(1)\n"
    fn = _cell_function(needs_another_cell, "double_all", 2, earlier_cells={"HELPER": lambda v: 2 * v})
    pieces.keep("double_all", fn, "07 collectives")
    assert pieces.piece("double_all", course=course_double_all) is course_double_all
    assert "yours did not load (NameError" in capsys.readouterr().out


def test_a_piece_that_fails_in_use_is_named_and_one_call_switches_it_off(capsys):
    wrong = "def double_all(values):\n    return [v * 2 for v in values[5]]\n"
    pieces.keep("double_all", _cell_function(wrong, "double_all", 3), "07 collectives")
    used = pieces.piece("double_all", course=course_double_all)
    with pytest.raises(pieces.PieceFailed, match=r"your double_all raised IndexError.*use_course\('double_all'\)"):
        used([1.0])
    pieces.use_course("double_all")
    assert pieces.piece("double_all", course=course_double_all) is course_double_all
    pieces.keep("double_all", _cell_function(wrong, "double_all", 3), "07 collectives")  # checked again: choice stays
    assert pieces.piece("double_all", course=course_double_all) is course_double_all
    pieces.use_yours("double_all")
    assert pieces.piece("double_all", course=course_double_all) is not course_double_all
    assert [row["use"] for row in pieces.pieces_table()] == ["yours"]


def test_off_keeps_nothing(monkeypatch):
    monkeypatch.setenv(pieces.STORE_ENV, "off")
    assert pieces.keep("double_all", _cell_function(CELL, "double_all"), "07 collectives") is None
    assert pieces.pieces_table() == []


def test_lesson_of_a_check_module():
    assert pieces.lesson_of_check_module("mlsys_lab.exercises.parallelism_ddp") == "08 parallelism"
    assert pieces.lesson_of_check_module("mlsys_lab.exercises.training_memory_references") == "06 training_memory"
    assert pieces.lesson_of_check_module("mlsys_lab.exercises.memory_hierarchy") == "04 memory_hierarchy"
