"""A kernel exercise's second point, for speed: counted the same way for every submission of the class.

A CUDA exercise's check earns one point for a correct kernel and a second when the kernel's speed meets the
exercise's floor (a fraction of the course's kernel on the same GPU). Both are at stake for every submission,
whatever happened to it (a crash or a hang loses both), so that ``max_score`` is the same across a class.
"""

from __future__ import annotations

import csv

import pytest

from mlsys_lab.course.cli import format_table, mark, write_csv
from mlsys_lab.course.grade import speed_point_exercises
from mlsys_lab.course.results import (
    ExerciseResult,
    SubmissionResult,
    exercise_result,
    not_graded,
    with_speed_point,
)

FAST = "3092 GB/s, 76% of copy bandwidth, 95% of the course's kernel; floor of 75% of the course's kernel met"
SLOW = "1500 GB/s, 37% of copy bandwidth, 46% of the course's kernel; below the floor of 75% of the course's kernel"


def serve(passed: bool, floor_met: bool | None, figure: str = "") -> dict:
    line = "✓ transpose_cuda: 12/12 cases" if passed else "✗ transpose_cuda: case 3 (one row): got [...]"
    return {"passed": True, "verdict": {"passed": passed, "line": line, "figure": figure, "needs": "",
                                        "floor_met": floor_met}, "why": "", "used": []}


EXERCISE_CELL = {"passed": True, "message": ""}


@pytest.mark.parametrize(("passed", "floor_met", "points"), [(True, True, 2), (True, False, 1), (False, False, 0)])
def test_points_of_a_kernel_exercise(passed, floor_met, points):
    """Correct and fast: 2 of 2; correct and slow: 1 of 2; wrong: 0 of 2 (the speed of a wrong kernel is moot)."""
    result = exercise_result(EXERCISE_CELL, serve(passed, floor_met, FAST if floor_met else SLOW), 30.0)
    assert (result.points, result.max_points) == (points, 2)
    assert result.speed is floor_met


def test_an_exercise_without_a_floor_keeps_one_point():
    result = exercise_result(EXERCISE_CELL, serve(True, None), 30.0)
    assert (result.points, result.max_points, result.speed) == (1, 1, None)


def test_a_crashed_kernel_exercise_still_has_two_points_at_stake():
    """A hang or crash leaves no verdict, hence no ``floor_met``: the grader still puts the speed point at stake."""
    hung = exercise_result({"passed": False, "message": "Timeout"}, None, 30.0)
    assert hung.max_points == 1
    timed = with_speed_point(hung, timed=True)
    assert (timed.points, timed.max_points, timed.speed) == (0, 2, False)
    assert with_speed_point(hung, timed=False) is hung
    # not graded here (no GPU): nothing at stake, not even the speed point
    elsewhere = with_speed_point(not_graded("needs a CUDA GPU"), timed=True)
    assert (elsewhere.points, elsewhere.max_points) == (0, 0)


def test_score_max_score_table_and_csv(tmp_path):
    fast, slow, wrong = (with_speed_point(exercise_result(EXERCISE_CELL, serve(p, f, fig), 30.0), True)
                         for p, f, fig in ((True, True, FAST), (True, False, SLOW), (False, None, "")))
    plain = ExerciseResult(True, "✓ sectors: 9/9 cases")
    results = [SubmissionResult("ada.ipynb", {"transpose_cuda": fast, "sectors": plain}),
               SubmissionResult("bo.ipynb", {"transpose_cuda": slow, "sectors": plain}),
               SubmissionResult("cy.ipynb", {"transpose_cuda": wrong, "sectors": plain})]
    assert [(r.score, r.max_score) for r in results] == [(3, 3), (2, 3), (1, 3)]
    assert [mark(r.exercises["transpose_cuda"]) for r in results] == ["✓+", "✓-", "✗"]
    table = format_table(results)
    assert "3/3" in table and "2/3" in table and "1/3" in table
    assert f"bo.ipynb · transpose_cuda: the speed point (-): {SLOW}" in table
    write_csv(results, tmp_path / "grades.csv")
    rows = list(csv.DictReader(open(tmp_path / "grades.csv", encoding="utf-8")))
    assert [(row["transpose_cuda"], row["score"], row["max_score"]) for row in rows] == [
        ("2", "3", "3"), ("1", "2", "3"), ("0", "1", "3")]
    assert results[1].to_json()["exercises"]["transpose_cuda"]["max_points"] == 2


def test_every_timed_kernel_exercise_is_marked():
    """The CUDA exercises that race the course's kernel are the ones with a speed point, and only they."""
    marked = speed_point_exercises()
    assert {"bias_gelu", "reduce_sum", "transpose_cuda"} <= marked
    assert "sectors" not in marked and "ring_allreduce" not in marked


def race_of(yours: float, course: float = 1e-3, ceiling: float = 0.8e-3, unit: str = "B", floor: float = 0.75):
    from mlsys_lab.exercises.cuda_kernels import KernelRace

    anchor = "copy" if unit == "B" else "cuBLAS"
    work = 2**28 if unit == "B" else 2 * 4096**3
    return KernelRace("NVIDIA H200", {"yours": yours, "course": course, anchor: ceiling},
                      {"yours": work, "course": work, anchor: work}, floor, unit, anchor)


def test_a_race_figure_in_bytes_and_in_flops():
    """268 MB in 1 ms is 268 GB/s; 2·4096³ FLOP in 10 ms is 13.7 TFLOP/s; the floor compares with the course's."""
    slow = race_of(1e-3 / 0.5)
    assert not slow.met and slow.figure().startswith("134 GB/s, 40% of copy bandwidth, 50% of the course's kernel")
    assert "below the floor of 75%" in slow.figure("uncoalesced")
    gemm = race_of(10e-3, course=8e-3, ceiling=3e-3, unit="FLOP", floor=0.5)
    assert gemm.met and gemm.figure().startswith("13.7 TFLOP/s, 30% of cuBLAS, 80% of the course's kernel")


def test_a_time_faster_than_its_ceiling_earns_no_speed_point():
    """A launcher that returns before its kernel finishes looks faster than a copy of the same bytes: not believed."""
    honest, too_fast = race_of(0.9e-3), race_of(0.6e-3)  # the copy of the same bytes takes 0.8 ms
    assert honest.plausible and honest.met
    assert not too_fast.plausible and not too_fast.met
    assert "not counted: faster than copy bandwidth measured in the same run" in too_fast.figure()
    assert not race_of(1e-3, ceiling=2e-3, unit="FLOP").plausible  # twice cuBLAS's rate: not believed
