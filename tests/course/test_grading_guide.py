"""Does the instructor guide's worked example print what the guide shows? Its command is read from the README and
run as written (in a scratch folder that sees the repository's notebooks and tests, so its files land there)."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from labserver import MAKE_N

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- worked example: tests/course/test_grading_guide.py"
SUBMISSIONS = ROOT / "tests" / "course" / "submissions" / "00_start_here"


def worked_example() -> tuple[str, str, str]:
    """(command, the table the guide shows, the CSV it shows), the three fenced blocks after the marker."""
    text = (ROOT / "README.md").read_text()
    assert MARKER in text, "the instructor guide has its worked example"
    blocks = re.findall(r"```(\w+)\n(.*?)```", text.split(MARKER, 1)[1], re.DOTALL)[:3]
    assert [kind for kind, _ in blocks] == ["bash", "text", "csv"]
    return blocks[0][1].strip(), blocks[1][1], blocks[2][1]


def test_submissions_are_made_from_the_handout():
    """Three hand-ins of lesson 00 (full, partial, empty): the exercise cells differ, everything else is the handout."""
    import nbformat

    from mlsys_lab.course.notebook_cells import EXERCISE, role_of
    from mlsys_lab.course.student import student_version

    handout = student_version(nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4))
    names = sorted(p.name for p in SUBMISSIONS.glob("*.ipynb"))
    assert names == ["ada_full.ipynb", "ben_partial.ipynb", "cleo_empty.ipynb"]
    for name in names:
        nb = nbformat.read(SUBMISSIONS / name, as_version=4)
        stubs = [c.source for c in nb.cells if role_of(c) == EXERCISE and "NotImplementedError" in c.source]
        assert len(stubs) == {"ada_full.ipynb": 0, "ben_partial.ipynb": 0, "cleo_empty.ipynb": 2}[name]
        assert len(nb.cells) == len(handout.cells)


def test_make_grade_runs_the_same_command():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    command, _, _ = worked_example()
    args = shlex.split(command)[1:]  # without the seed
    plan = subprocess.run([*MAKE_N, "grade", f"VENV={sys.prefix}", "REF=notebooks/00_start_here.ipynb",
                           f"SUBMISSIONS={args[2]}", "CSV=grades_00.csv", "JSON=grades_00.jsonl"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"{sys.prefix}/bin/mlsys-lab {shlex.join(args[1:])}" in plan


@pytest.mark.slow
def test_worked_example_prints_what_the_guide_shows(tmp_path):
    command, table, csv = worked_example()
    words = shlex.split(command)
    env = dict(os.environ)
    while "=" in words[0]:  # VAR=value prefixes
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[0] == ".venv/bin/mlsys-lab", "the guide's command is copy-pasteable from the repository's folder"
    words[0] = str(Path(sys.executable).with_name("mlsys-lab"))
    for name in ("notebooks", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == table
    assert (tmp_path / "grades_00.csv").read_text() == csv
    lines = [json.loads(line) for line in (tmp_path / "grades_00.jsonl").read_text().splitlines()]
    assert [(Path(r["submission"]).name, r["score"], r["max_score"]) for r in lines] == [
        ("ada_full.ipynb", 2, 2), ("ben_partial.ipynb", 1, 2), ("cleo_empty.ipynb", 0, 2)]
    lost = {f"  {r['submission']} · {name}: {e['message']}" for r in lines for name, e in r["exercises"].items()
            if not e["passed"]}
    assert lost == {line for line in table.split("points lost:\n", 1)[1].splitlines() if line.strip()}
