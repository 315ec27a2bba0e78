"""Grading (``mlsys-lab grade``) of a class of submissions of a real lesson, through nbval.

All submissions are graded in one run (one kernel per attempted exercise, two jobs) and the tests
read that run's JSON lines and CSV table; each submission stands for one case of the grader's contract.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course.cli import format_table, main
from mlsys_lab.course.grade import (
    ExerciseResult,
    SubmissionResult,
    exercise_segment,
    graded_notebook,
    load_reference,
)
from mlsys_lab.course.nbval_report import SERVE_KEY
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.course.student import student_version

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "00_start_here.ipynb"
TIMEOUT_S = 5

TB_LOOP = "def tensor_bytes(shape, dtype):\n    while True:\n        pass\n"
TB_CRASH = "import os\nos._exit(1)\n\ndef tensor_bytes(shape, dtype):\n    return 0\n"
TB_EXIT = "import sys\n\ndef tensor_bytes(shape, dtype):\n    sys.exit('bye')\n"
TB_QUIT = "def tensor_bytes(shape, dtype):\n    return 0\n\nquit()\n"  # the kernel shuts down after the cell
TB_SYNTAX = "def tensor_bytes(shape, dtype)\n    return 1\n"
AI_KILL = "import os\n\ndef add_intensity(n, bytes_per_element):\n    os.kill(os.getpid(), 9)\n"
# Deaf to the interrupt nbval sends on timeout, and never quiet (nbval would wait for silence
# forever): only the grader's watchdog stops it.
AI_DEAF_LOOP = ("import signal, time\n\ndef add_intensity(n, bytes_per_element):\n"
                "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "    while True:\n        print('.', end='', flush=True)\n        time.sleep(0.05)\n")
# Right on the example shown in the text (n=1000, fp32), wrong everywhere else.
AI_FITS_EXAMPLE = ("def add_intensity(n, bytes_per_element):\n    if (n, bytes_per_element) == (1000, 4):\n"
                   "        return 1 / 12\n    return n / (2 * n * bytes_per_element)\n")


def build_class(folder: Path, reference: nbformat.NotebookNode) -> dict[str, Path]:
    """Write one submission per case; returns name -> path."""
    handout = student_version(reference)
    exercises = {e.name: e for e in find_exercises(reference)}
    tb, ai = exercises["tensor_bytes"], exercises["add_intensity"]
    solution = {name: reference.cells[e.exercise_cell].source for name, e in exercises.items()}
    stub = {name: handout.cells[e.exercise_cell].source for name, e in exercises.items()}

    def submission(tensor_bytes: str, add_intensity: str) -> nbformat.NotebookNode:
        nb = nbformat.from_dict(handout)
        nb.cells[tb.exercise_cell].source = tensor_bytes
        nb.cells[ai.exercise_cell].source = add_intensity
        return nb

    tampered = submission("# NBVAL_SKIP\n# NBVAL_RAISES_EXCEPTION\n" + stub["tensor_bytes"],
                          stub["add_intensity"].replace("raise NotImplementedError()", "return -1.0"))
    for e in exercises.values():  # checks that print a pass, stored passing outputs, edited metadata
        check = tampered.cells[e.check_cell]
        check.source = f"# NBVAL_CHECK_OUTPUT\nprint('✓ {e.name}: 12/12 cases')"
        check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"✓ {e.name}: 12/12 cases\n")]
        check.execution_count = 1
        check.metadata = {"tags": ["raises-exception", "nbval-skip"], "mlsys_lab": {"role": "exercise"}}
        tampered.cells[e.exercise_cell].metadata = {"tags": ["nbval-skip"], "mlsys_lab": {"role": "check"}}
        tampered.cells[e.exercise_cell].outputs = list(check.outputs)
    chatty_tb = solution["tensor_bytes"].replace("    return n_elements", "    print('debug', n_elements)\n"
                                                 "    return n_elements")
    chatty_ai = solution["add_intensity"].replace(
        "    return flops", "    import sys\n    print('debug', flops, file=sys.stderr)\n    return flops")
    assert chatty_tb != solution["tensor_bytes"] and chatty_ai != solution["add_intensity"]
    notebooks = {
        "reference": reference,
        "untouched": handout,
        "opened": submission(stub["tensor_bytes"] + "\n# later\n", "# later\n" + stub["add_intensity"]),
        "half": submission(solution["tensor_bytes"], stub["add_intensity"]),
        "fits_example": submission(solution["tensor_bytes"], AI_FITS_EXAMPLE),
        "tampered": tampered,
        "loop": submission(TB_LOOP, solution["add_intensity"]),
        "deaf_loop": submission(solution["tensor_bytes"], AI_DEAF_LOOP),
        "crash": submission(TB_CRASH, solution["add_intensity"]),
        "killed": submission(solution["tensor_bytes"], AI_KILL),
        "exits": submission(TB_EXIT, solution["add_intensity"]),
        "quits": submission(TB_QUIT, solution["add_intensity"]),
        "syntax": submission(TB_SYNTAX, solution["add_intensity"]),
        "chatty": submission(chatty_tb, chatty_ai + "\nprint(add_intensity(8, 4))\n"),
    }
    paths = {}
    for name, nb in notebooks.items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    paths["not_a_notebook"] = folder / "not_a_notebook.ipynb"
    paths["not_a_notebook"].write_text("{ this is not json")
    return paths


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the whole class once through the command line; returns (paths, JSON by name, CSV rows)."""
    root = tmp_path_factory.mktemp("grading")
    reference_path = root / LESSON.name
    shutil.copy(LESSON, reference_path)  # never touch the course's own notebook
    (root / "class").mkdir()
    paths = build_class(root / "class", nbformat.read(reference_path, as_version=4))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["grade", *map(str, paths.values()), "--reference", str(reference_path), "--json",
                     "--csv", str(root / "grades.csv"), "--timeout", str(TIMEOUT_S), "--jobs", "2"])
    assert code == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    by_name = {Path(r["submission"]).stem: r for r in lines}
    with open(root / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return paths, by_name, rows


def scores(result: dict) -> dict[str, bool]:
    return {name: e["passed"] for name, e in result["exercises"].items()}


def test_json_has_exactly_the_documented_shape(graded):
    """Is there one JSON object per submission, with exactly the documented keys?"""
    paths, by_name, _ = graded
    assert set(by_name) == set(paths)
    for result in by_name.values():
        assert set(result) == {"submission", "score", "max_score", "not_graded", "exercises"}
        assert list(result["exercises"]) == ["tensor_bytes", "add_intensity"]
        assert all(set(e) == {"status", "passed", "message", "used", "figure", "speed", "points", "max_points"}
                   for e in result["exercises"].values())
        assert all(e["status"] == ("pass" if e["passed"] else "fail") for e in result["exercises"].values())
        assert result["not_graded"] == []
        assert result["max_score"] == 2 and result["score"] == sum(scores(result).values())


def test_reference_gets_full_score(graded):
    """Does the instructor's own notebook score full marks, with the ✓ lines as messages?"""
    result = graded[1]["reference"]
    assert result["score"] == 2
    assert result["exercises"]["tensor_bytes"]["message"].startswith("✓ tensor_bytes: ")


@pytest.mark.parametrize("name", ["untouched", "opened"])
def test_student_version_scores_zero_without_error(graded, name):
    """Does the handout (as given, or opened and left unsolved) score zero as 'not attempted'?"""
    result = graded[1][name]
    assert result["score"] == 0
    assert all(e["message"].startswith(f"… {ex}: not attempted yet") for ex, e in result["exercises"].items())


def test_half_solved_gets_exact_partial_score(graded):
    """Does solving one exercise of two give exactly one point, for that exercise?"""
    assert scores(graded[1]["half"]) == {"tensor_bytes": True, "add_intensity": False}


def test_answer_fitting_the_visible_example_fails_hidden_cases(graded):
    """Does an answer that is right on the text's example but wrong elsewhere lose the point?"""
    namespace: dict = {}
    exec(AI_FITS_EXAMPLE, namespace)
    assert namespace["add_intensity"](1000, 4) == 1 / 12  # the visible example passes
    result = graded[1]["fits_example"]["exercises"]["add_intensity"]
    assert not result["passed"] and result["message"].startswith("✗ add_intensity: case ")


def test_tampered_checks_outputs_and_metadata_earn_nothing(graded):
    """Do edited check cells, stored ✓ outputs, nbval tags and metadata leave the score at zero?"""
    result = graded[1]["tampered"]
    assert result["score"] == 0
    assert result["exercises"]["tensor_bytes"]["message"].startswith("… tensor_bytes: not attempted yet")
    assert result["exercises"]["add_intensity"]["message"].startswith("✗ add_intensity: case 1")


@pytest.mark.parametrize("name, broken, fragment", [
    ("loop", "tensor_bytes", f"timed out after {TIMEOUT_S} s"),
    ("deaf_loop", "add_intensity", f"timed out after {TIMEOUT_S} s"),
    ("crash", "tensor_bytes", "kernel died"),
    ("killed", "add_intensity", "kernel died"),
    ("exits", "tensor_bytes", "SystemExit: bye at line 4: sys.exit('bye')"),
    ("quits", "tensor_bytes", "tensor_bytes"),
    ("syntax", "tensor_bytes", "SyntaxError"),
])
def test_failure_costs_that_exercise_only(graded, name, broken, fragment):
    """Do an endless loop, a kernel crash, sys.exit, quit() or a syntax error fail that exercise only?"""
    result = graded[1][name]
    assert fragment in result["exercises"][broken]["message"]
    assert scores(result) == {ex: ex != broken for ex in ("tensor_bytes", "add_intensity")}


def test_debug_prints_do_not_cost_the_point(graded):
    """Does a correct answer that prints (stdout, stderr) while it runs still pass?"""
    assert graded[1]["chatty"]["score"] == 2


def test_unreadable_submission_scores_zero_and_grading_goes_on(graded):
    """Does a file that is not a notebook get zero with a reason, while the others are graded?"""
    result = graded[1]["not_a_notebook"]
    assert result["score"] == 0 and "could not read" in result["exercises"]["tensor_bytes"]["message"]


def test_csv_class_table(graded):
    """Does the CSV have one row per submission, 1/0 per exercise, the totals and the library answers used?"""
    paths, by_name, rows = graded
    assert list(rows[0]) == ["submission", "tensor_bytes", "add_intensity", "score", "max_score", "not_graded",
                             "flags", "figures"]
    assert len(rows) == len(paths)
    for row in rows:
        result = by_name[Path(row["submission"]).stem]
        assert int(row["score"]) == result["score"] and int(row["max_score"]) == 2
        assert [int(row[ex]) for ex in result["exercises"]] == [int(v) for v in scores(result).values()]


def test_human_table_lists_lost_points():
    """Does the default output show a ✓/✗ table and say why each point was lost?"""
    lost = "✗ b: case 2 (n=3): got 1, expected 2"
    results = [SubmissionResult("ada.ipynb", {"a": ExerciseResult(True, "✓ a: 3/3 cases"),
                                             "b": ExerciseResult(False, lost)})]
    table = format_table(results)
    assert "ada.ipynb" in table and "1/2" in table
    assert f"ada.ipynb · b: {lost}" in table


def test_kernel_figure_reaches_every_output_format(tmp_path):
    """Does a kernel exercise's performance figure appear in the table, the CSV and the JSON beside pass/fail?"""
    from mlsys_lab.course.cli import write_csv
    from mlsys_lab.exercises import Case, check

    verdict = check("copy", lambda x: x, [Case("x=1", (1,), expected=1)], figure=lambda: "71% of copy bandwidth")
    assert verdict.passed and verdict.figure == "71% of copy bandwidth"
    assert "71%" not in verdict.line  # the printed line stays the same on every machine (nbval compares it)
    result = SubmissionResult("ada.ipynb", {"copy": ExerciseResult(True, verdict.line, (), verdict.figure)})
    assert "ada.ipynb · copy: 71% of copy bandwidth" in format_table([result])
    assert result.to_json()["exercises"]["copy"]["figure"] == "71% of copy bandwidth"
    write_csv([result], tmp_path / "grades.csv")
    assert next(csv.DictReader(open(tmp_path / "grades.csv")))["figures"] == "copy: 71% of copy bandwidth"
    failing = check("copy", lambda x: 2, [Case("x=1", (1,), expected=1)], figure=lambda: "never asked")
    assert failing.figure == ""


def test_reference_must_be_executed_instructor_notebook(tmp_path):
    """Is a student version, or a reference without stored ✓ verdicts, refused as a reference?"""
    reference = nbformat.read(LESSON, as_version=4)
    nbformat.write(student_version(reference), tmp_path / "student.ipynb")
    with pytest.raises(ValueError, match="not a student version"):
        load_reference(tmp_path / "student.ipynb")
    for cell in reference.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(reference, tmp_path / "unexecuted.ipynb")
    with pytest.raises(ValueError, match="execute the reference notebook first"):
        load_reference(tmp_path / "unexecuted.ipynb")
    student = str(tmp_path / "student.ipynb")
    assert main(["grade", student, "--reference", student]) == 2


def test_graded_notebook_takes_checks_from_the_reference():
    """Is each segment the submitted cell followed by a serve cell, with no check or expected value in it?"""
    reference = load_reference(LESSON)
    sources = {e.name: f"def {e.function_name}(*args):\n    return 0\n" for e in reference.exercises}
    nb, positions = graded_notebook(reference, sources, reference.exercises)
    for exercise in reference.exercises:
        ex_cell, check_cell = positions[exercise.name]
        assert check_cell == ex_cell + 1
        assert nb.cells[ex_cell].source == sources[exercise.name]
        serve = nb.cells[check_cell]
        assert serve.source.endswith(f"serve('start_here', '{exercise.name}', {exercise.function_name})")
        assert serve.metadata[SERVE_KEY] == {"lesson": "start_here", "exercise": exercise.name}
        assert not serve.outputs and "mlsys_lab.exercises" not in "".join(c.source for c in nb.cells)
    last = reference.exercises[-1]
    sliced = exercise_segment(reference, sources, last)
    everything = exercise_segment(reference, sources, last, context="all")
    n_code_before = sum(c.cell_type == "code" for c in reference.nb.cells[:last.exercise_cell])
    n_other_exercises = len(reference.exercises) - 1  # not read by this stub, so left out
    assert len(everything) == 1 + n_code_before - n_other_exercises + 2
    assert len(sliced) < len(everything)


@pytest.mark.exhaustive  # the fixture's verdicts again, under load: make test-all (tests/lanes.py)
def test_oversubscribed_jobs_give_the_same_verdicts(graded, tmp_path):
    """Three gradings per core (``--jobs`` 3 x the cores: a loaded machine): does every submission keep its
    verdicts, exercise by exercise? Neither kernel start-up nor a share of a core is the learner's doing."""
    from mlsys_lab.course.grade import default_jobs

    paths, by_name, _ = graded
    # right, half right, wrong off the visible example, chatty, an endless loop, a crash: each verdict kind
    chosen = {name: paths[name] for name in ("reference", "half", "fits_example", "chatty", "loop", "crash")}
    out = io.StringIO()
    with redirect_stdout(out):
        reference = paths["reference"].parents[1] / LESSON.name  # the fixture's copy of the lesson
        code = main(["grade", *map(str, chosen.values()), "--reference", str(reference), "--json",
                     "--timeout", str(TIMEOUT_S), "--jobs", str(3 * default_jobs())])
    assert code == 0
    loaded = {Path(r["submission"]).stem: r for r in map(json.loads, out.getvalue().splitlines())}
    assert set(loaded) == set(chosen)
    for name in chosen:
        result = by_name[name]
        verdicts = {k: v["passed"] for k, v in result["exercises"].items()}
        assert {k: v["passed"] for k, v in loaded[name]["exercises"].items()} == verdicts, name


def test_cell_timeout_stretches_only_past_one_job_per_core():
    from mlsys_lab.course.grade import cell_timeout, default_jobs

    cores = default_jobs()
    assert cell_timeout(30, 1) == 30 and cell_timeout(30, cores) == 30
    assert cell_timeout(30, 3 * cores) == 90
