"""An exercise is passed, failed, or *not graded*: when the grader fails (its check raises in the grading process,
pytest exits abnormally, a kernel cannot start, a lesson cell run before the exercise times out), the learner gets
no ✗ for it. The table shows ``?``, the CSV ``NG``, the JSON ``"status": "not_graded"``; neither score nor
max_score counts it, and ``mlsys-lab grade`` exits with 3.

The grader's faults are played in its pytest subprocess by the plugin ``tests/course/grader_faults.py``; the
lesson is lesson 00 with one slow cell of the lesson's added before the second exercise.
"""

from __future__ import annotations

import csv
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course import cli
from mlsys_lab.course.cli import NOT_GRADED_EXIT, format_table, main, write_csv
from mlsys_lab.course.grade import ExerciseResult, SubmissionResult, exercise_segment, load_reference
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.course.results import not_graded, segment_result
from mlsys_lab.course.student import student_version

HERE = Path(__file__).resolve().parent
LESSON = HERE.parents[1] / "notebooks" / "00_start_here.ipynb"
TIMEOUT_S = 5
SLOW_CELL = "import time\n\nslow_table = [time.sleep(60)]"  # a lesson cell longer than any timeout here
SLOW_COUNT = 99  # its In [99]


def fake_lesson(folder: Path) -> Path:
    """Lesson 00 with SLOW_CELL (executed as In [99]) just before add_intensity's exercise cell."""
    nb = nbformat.read(LESSON, as_version=4)
    add_intensity = next(e for e in find_exercises(nb) if e.name == "add_intensity")
    slow = nbformat.v4.new_code_cell(SLOW_CELL, execution_count=SLOW_COUNT)
    nb.cells.insert(add_intensity.exercise_cell, slow)
    path = folder / "00_start_here.ipynb"
    nbformat.write(nb, path)
    return path


def submissions(reference: Path, folder: Path) -> dict[str, Path]:
    nb = nbformat.read(reference, as_version=4)
    exercises = {e.name: e for e in find_exercises(nb)}
    solution = {name: nb.cells[e.exercise_cell].source for name, e in exercises.items()}
    handout = student_version(nb)
    reads_slow = ("def add_intensity(n, bytes_per_element):\n    assert slow_table\n"
                  "    return 1 / (3 * bytes_per_element)\n")
    reads_own = ("def add_intensity(n, bytes_per_element):\n    assert tensor_bytes\n"
                 "    return 1 / (3 * bytes_per_element)\n")
    cases = {
        "honest": (solution["tensor_bytes"], solution["add_intensity"]),
        "reads_lesson_cell": (solution["tensor_bytes"], reads_slow),
        "slow_own_cell": (solution["tensor_bytes"] + "\nimport time\n\ntime.sleep(60)\n", reads_own),
    }
    paths = {}
    for name, (tb, ai) in cases.items():
        sub = nbformat.from_dict(handout)
        sub.cells[exercises["tensor_bytes"].exercise_cell].source = tb
        sub.cells[exercises["add_intensity"].exercise_cell].source = ai
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(sub, paths[name])
    return paths


def run_grade(paths: list[Path], reference: Path, faults: str, out: Path) -> tuple[int, str, str, dict, list]:
    """``mlsys-lab grade`` with the grader faults ``faults``: (exit status, table, stderr, JSON by name, CSV rows)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS", "-p grader_faults")
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        mp.setenv("MLSYS_LAB_TEST_FAULTS", faults)
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(["grade", *map(str, paths), "--reference", str(reference), "--timeout", str(TIMEOUT_S),
                         "--jobs", "1", "--csv", str(out / "grades.csv"), "--json-file", str(out / "grades.jsonl")])
    lines = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return code, stdout.getvalue(), stderr.getvalue(), {Path(r["submission"]).stem: r for r in lines}, rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once while ``check_tensor_bytes`` raises MemoryError in the grading process."""
    root = tmp_path_factory.mktemp("states")
    reference = fake_lesson(root)
    (root / "class").mkdir()
    paths = submissions(reference, root / "class")
    return run_grade(list(paths.values()), reference, "check_raises", root)


def status(result: dict) -> dict[str, str]:
    return {name: e["status"] for name, e in result["exercises"].items()}


def test_check_raising_in_the_grader_is_not_graded(graded):
    """Does a check that raises in the grading process give 'not graded', not a ✗, and cost no point?"""
    code, table, stderr, by_name, rows = graded
    honest = by_name["honest"]
    assert status(honest) == {"tensor_bytes": "not_graded", "add_intensity": "pass"}
    message = honest["exercises"]["tensor_bytes"]["message"]
    assert message.startswith("not graded: grader error: ") and "MemoryError" in message
    assert not honest["exercises"]["tensor_bytes"]["passed"]
    assert (honest["score"], honest["max_score"], honest["not_graded"]) == (1, 1, ["tensor_bytes"])
    row = next(r for r in rows if Path(r["submission"]).stem == "honest")
    assert (row["tensor_bytes"], row["add_intensity"], row["score"], row["max_score"], row["not_graded"]) == \
        ("NG", "1", "1", "1", "1")
    line = next(line for line in table.splitlines() if "honest.ipynb" in line and "·" not in line)
    assert line.split()[1:] == ["?", "✓", "1/1", "(1", "not", "graded)"]
    assert "✗" not in line


def test_not_graded_exits_non_zero_and_says_so(graded):
    """Does ``mlsys-lab grade`` exit with 3 and tell the instructor, on stderr, not to record zeros?"""
    code, table, stderr, _, _ = graded
    assert code == NOT_GRADED_EXIT == 3
    assert "must not record those as zeros" in stderr
    assert "not graded (?)" in table


def test_lesson_cell_timing_out_before_the_exercise_names_it(graded):
    """Does a lesson cell that times out before the learner's exercise ran give 'not graded', naming the cell?"""
    result = graded[3]["reads_lesson_cell"]["exercises"]["add_intensity"]
    assert result["status"] == "not_graded"
    assert f"the lesson's cell [{SLOW_COUNT}] (`slow_table = [time.sleep(60)]`) timed out after {TIMEOUT_S} s, " \
           "before your exercise ran" in result["message"]


def test_learners_own_earlier_cell_timing_out_is_a_named_fail(graded):
    """Does the learner's own earlier cell, timing out in this exercise's context, fail it with a message naming
    that cell (never an empty ✗)?"""
    exercises = graded[3]["slow_own_cell"]["exercises"]
    assert exercises["tensor_bytes"]["status"] == "fail"
    assert f"timed out after {TIMEOUT_S} s" in exercises["tensor_bytes"]["message"]
    assert exercises["add_intensity"]["status"] == "fail"
    assert exercises["add_intensity"]["message"].startswith(
        "your cell of exercise tensor_bytes (`BYTES_PER_ELEMENT = ") and \
        exercises["add_intensity"]["message"].endswith(f"timed out after {TIMEOUT_S} s, before your exercise ran")


def test_no_exercise_has_an_empty_message(graded):
    assert all(e["message"].strip() for r in graded[3].values() for e in r["exercises"].values())


def test_kernel_that_cannot_start_is_not_graded(tmp_path):
    """Does a worker kernel that never starts leave every exercise 'not graded', the class graded on?"""
    reference = fake_lesson(tmp_path)
    (tmp_path / "class").mkdir()
    paths = submissions(reference, tmp_path / "class")
    code, _, stderr, by_name, _ = run_grade([paths["honest"]], reference, "kernel_start", tmp_path)
    assert code == NOT_GRADED_EXIT
    result = by_name["honest"]
    assert status(result) == {"tensor_bytes": "not_graded", "add_intensity": "not_graded"}
    assert "could not start" in result["exercises"]["tensor_bytes"]["message"]
    assert (result["score"], result["max_score"]) == (0, 0)


def test_pytest_dying_costs_only_what_it_had_not_graded(tmp_path):
    """Does pytest exiting abnormally mid-notebook leave what it graded, mark the rest 'not graded', and not abort
    the class?"""
    reference = fake_lesson(tmp_path)
    (tmp_path / "class").mkdir()
    paths = submissions(reference, tmp_path / "class")
    code, _, stderr, by_name, _ = run_grade([paths["honest"]], reference, "pytest_dies", tmp_path)
    assert code == NOT_GRADED_EXIT
    result = by_name["honest"]
    assert status(result) == {"tensor_bytes": "pass", "add_intensity": "not_graded"}
    assert "pytest exited with code 70" in result["exercises"]["add_intensity"]["message"]
    assert "pytest exited with code 70" in stderr


# --- the three states in every output, without a kernel --------------------------------------------------------
def three_states() -> SubmissionResult:
    return SubmissionResult("ada.ipynb", {"a": ExerciseResult(True, "✓ a: 3/3 cases"),
                                         "b": ExerciseResult(False, "✗ b: case 1 (n=1): got 1, expected 2"),
                                         "c": not_graded("the grader failed: ZeroDivisionError: boom")})


def test_every_output_keeps_the_three_states_apart(tmp_path):
    result = three_states()
    assert (result.score, result.max_score, result.not_graded) == (1, 2, ["c"])
    assert [e["status"] for e in result.to_json()["exercises"].values()] == ["pass", "fail", "not_graded"]
    table = format_table([result])
    assert table.splitlines()[1].split()[1:] == ["✓", "✗", "?", "1/2", "(1", "not", "graded)"]
    lost, unknown = table.split("points lost:", 1)[1].split("not graded (?)", 1)
    assert "· b:" in lost and "· c:" not in lost and "· c: not graded: grader error: the grader failed" in unknown
    write_csv([result], tmp_path / "grades.csv")
    row = next(csv.DictReader(open(tmp_path / "grades.csv", encoding="utf-8")))
    assert (row["a"], row["b"], row["c"], row["score"], row["max_score"], row["not_graded"]) == \
        ("1", "0", "NG", "1", "2", "1")


def test_cli_exit_status_follows_the_states(monkeypatch, capsys, tmp_path):
    reference = fake_lesson(tmp_path)
    monkeypatch.setattr(cli, "grade", lambda *args, **kwargs: [three_states()])
    assert main(["grade", str(reference), "--reference", str(reference), "--json"]) == NOT_GRADED_EXIT
    assert "must not record those as zeros" in capsys.readouterr().err
    graded_only = SubmissionResult("ada.ipynb", dict(list(three_states().exercises.items())[:2]))
    monkeypatch.setattr(cli, "grade", lambda *args, **kwargs: [graded_only])
    assert main(["grade", str(reference), "--reference", str(reference), "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_segment_result_reads_which_cell_stopped(tmp_path):
    """From the records alone: a lesson cell's timeout (the exercise cell then an xfail, passed=False with no
    message) is 'not graded' when nothing of the learner's ran before it, a named fail when their own cell did or
    timed out; a crash without records is 'not graded'."""
    reference = load_reference(fake_lesson(tmp_path))
    exercise = next(e for e in reference.exercises if e.name == "add_intensity")
    helper = "def tensor_bytes(shape, dtype):\n    return 0\n"

    def segment(reads: str) -> list:
        sources = {"tensor_bytes": helper, "add_intensity": f"def add_intensity(n, b):\n    return {reads}\n"}
        return exercise_segment(reference, sources, exercise)

    def records(cells: list, stopped: str) -> list[dict]:
        at = next(i for i, c in enumerate(cells) if c.source == stopped)
        timeout = f"Timeout of {TIMEOUT_S} seconds exceeded while executing cell."
        return [{"passed": i < at, "message": timeout if i == at else "", "timed_out": i == at, "died": False,
                 "grader_error": False} for i in range(len(cells))]

    lesson_only = segment("slow_table")
    assert helper not in [c.source for c in lesson_only]
    result = segment_result(lesson_only, records(lesson_only, SLOW_CELL), TIMEOUT_S)
    assert result.status == "not_graded" and result.message == (
        f"not graded: grader error: the lesson's cell [{SLOW_COUNT}] (`slow_table = [time.sleep(60)]`) timed out "
        f"after {TIMEOUT_S} s, before your exercise ran")
    both = segment("slow_table, tensor_bytes")
    after_learner = segment_result(both, records(both, SLOW_CELL), TIMEOUT_S)
    assert after_learner.status == "fail" and after_learner.message.startswith(f"the lesson's cell [{SLOW_COUNT}]")
    own = segment_result(both, records(both, helper), TIMEOUT_S)
    assert own.status == "fail" and own.message == (
        f"your cell of exercise tensor_bytes (`def tensor_bytes(shape, dtype):`) timed out after {TIMEOUT_S} s, "
        "before your exercise ran")
    finished = [{**r, "passed": True, "timed_out": False, "message": ""} for r in records(both, SLOW_CELL)]
    slow = next(i for i, c in enumerate(both) if c.source == SLOW_CELL)
    raised = [{**r, "passed": False, "message": "OSError: refused"} if i == slow else r for i, r in enumerate(finished)]
    wrong = {"verdict": {"passed": False, "line": "✗ add_intensity: case 1 (n=1): got 1, expected 2", "figure": ""}}
    right = {"verdict": {"passed": True, "line": "✓ add_intensity: 13/13 cases", "figure": ""}}
    fail = segment_result(both, [*raised[:-1], {**raised[-1], **wrong}], TIMEOUT_S)
    assert fail.status == "fail" and fail.message == (
        f"{wrong['verdict']['line']} (note: the lesson's cell [{SLOW_COUNT}] (`slow_table = [time.sleep(60)]`) "
        "raised OSError: refused, before your exercise ran)")
    assert segment_result(both, [*raised[:-1], {**raised[-1], **right}], TIMEOUT_S).message == right["verdict"]["line"]
    crashed = segment_result(both, [*finished[:-2], None, None], TIMEOUT_S, crashed="pytest exited with code 70")
    assert crashed.status == "not_graded" and crashed.message.endswith("pytest exited with code 70")
