"""Does every lesson grade as it should: its own solutions in full, its untouched student version at zero?

Three lessons' solutions are graded in full by other tests, so here only their handouts are graded (that needs
no kernel): 00 by ``test_grade.py`` (its "reference" submission), 09 and 10 by ``test_grade_red_team.py`` (its
honest classmates hand in every solution and must keep full marks).

The quick lane (``make test``) grades :data:`QUICK_LESSON`; ``make test-all`` grades every lesson (``tests/lanes.py``).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS_GRADED_ELSEWHERE = {"00_start_here", "09_fault_tolerance", "10_peft"}
QUICK_LESSON = "03_roofline"  # solutions graded in full, numeric checks and a kernel timed in the grader

pytestmark = pytest.mark.slow


def grade(submissions: list[Path], reference: Path) -> list[dict]:
    result = subprocess.run([sys.executable, "-m", "mlsys_lab.course.cli", "grade", *map(str, submissions),
                             "--reference", str(reference), "--json", "--timeout", "120"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("lesson", [p if p.stem == QUICK_LESSON else pytest.param(p, marks=pytest.mark.exhaustive)
                                    for p in LESSONS], ids=lambda p: p.stem)
def test_reference_scores_full_and_student_version_zero(lesson, tmp_path):
    student = tmp_path / lesson.name
    subprocess.run([sys.executable, "-m", "mlsys_lab.course.cli", "student", str(lesson), str(student)],
                   check=True, capture_output=True)
    full_too = lesson.stem not in SOLUTIONS_GRADED_ELSEWHERE
    by_file = {Path(r["submission"]).resolve(): r for r in grade([lesson, student] if full_too else [student], lesson)}
    handout = by_file[student.resolve()]
    assert handout["max_score"] >= 2, "each lesson has exercises"
    if full_too:
        full = by_file[lesson.resolve()]
        assert full["score"] == full["max_score"], {k: v["message"] for k, v in full["exercises"].items()}
    assert handout["score"] == 0
    assert all("not attempted yet" in v["message"] for v in handout["exercises"].values())
