"""What grading found: one result per exercise, in one of three states, read from the graded cells' records.

- **pass** (✓): the exercise cell ran and the check, run in the grading process, passed.
- **fail** (✗): the learner's code failed the check, raised, hung, crashed, hit a limit, or was not attempted.
- **not graded** (?): the grader failed, not the submission: the check raised in the grading process, pytest
  exited abnormally, a worker kernel could not start, a cell of the lesson (run before the exercise, with no
  code of the learner's yet) timed out or died, or a record is missing. It counts in neither
  ``score`` nor ``max_score``; an instructor must not record it as a zero, but fix the cause and grade again.
  An exercise the grading machine cannot run (``Verdict.needs``: a kernel exercise without a CUDA GPU) is not
  graded either, with the message "not graded here: needs a CUDA GPU": grade it again on a machine with one.

The state comes from fields the grader's own code sets (``grader_error``, ``timed_out``, ``died`` in the
records of :mod:`mlsys_lab.course.nbval_report`, and where each graded cell came from, ``ORIGIN_KEY``),
never from text the learner's kernel printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nbformat import NotebookNode

ORIGIN_KEY = "mlsys_lab_origin"  # a context cell's reference cell: {"cell": index, "count": In [n], "exercise": name}
PASS_STATUS, FAIL_STATUS, NOT_GRADED = "pass", "fail", "not_graded"
NOT_GRADED_PREFIX = "not graded: grader error: "
NOT_GRADED_HERE_PREFIX = "not graded here: "  # the grading machine lacks what the exercise needs (a CUDA GPU)


@dataclass(frozen=True)
class ExerciseResult:
    passed: bool
    message: str
    # Lesson functions that answer this exercise and that the submission called or names
    # ("mlsys_lab.fault_tolerance.reliability.expected_goodput"): flagged, not failed (README, instructor guide).
    used: tuple[str, ...] = ()
    # A kernel exercise's performance on a pass ("71% of copy bandwidth"), computed by its check; else "".
    figure: str = ""
    # The grader failed, not the submission: neither a pass nor a fail (set by the grader's code only).
    grader_error: bool = False
    # A kernel exercise's second point, for speed: True when its check timed it at or above the exercise's floor,
    # False when it missed the floor or was not correct; None for an exercise that has no speed point.
    speed: bool | None = None

    @property
    def points(self) -> int:
        """Points earned: one for a pass, and one more for a kernel exercise's speed."""
        return int(self.passed) + int(bool(self.speed) and self.passed)

    @property
    def max_points(self) -> int:
        """Points at stake: none when not graded, two for a kernel exercise with a speed floor, else one."""
        return 0 if self.grader_error else 1 + (self.speed is not None)

    @property
    def flag(self) -> str:
        return "; ".join(f"used `{name}`" for name in self.used)

    @property
    def needs_elsewhere(self) -> bool:
        """Not graded because this machine lacks what the exercise needs (a CUDA GPU), not the grader's failure."""
        return self.grader_error and self.message.startswith(NOT_GRADED_HERE_PREFIX)

    @property
    def status(self) -> str:
        """``"pass"``, ``"fail"`` or ``"not_graded"``."""
        return NOT_GRADED if self.grader_error else PASS_STATUS if self.passed else FAIL_STATUS


def with_speed_point(result: ExerciseResult, timed: bool) -> ExerciseResult:
    """``result`` of a kernel exercise with a speed point (``timed``): that point is at stake whatever happened,
    so a submission whose kernel crashed, hung or was not attempted has it lost (``speed`` False), not absent."""
    if not timed or result.grader_error or result.speed is not None:
        return result
    return replace(result, speed=False)


def not_graded(why: str) -> ExerciseResult:
    """The result of an exercise the grader could not grade, and why."""
    return ExerciseResult(False, NOT_GRADED_PREFIX + why, grader_error=True)


@dataclass
class SubmissionResult:
    submission: str
    exercises: dict[str, ExerciseResult] = field(default_factory=dict)

    @property
    def score(self) -> int:
        return sum(r.points for r in self.exercises.values())

    @property
    def max_score(self) -> int:
        """The points at stake in the exercises graded (one each, two for a kernel exercise with a speed floor):
        one not graded counts in neither the score nor the maximum."""
        return sum(r.max_points for r in self.exercises.values())

    @property
    def not_graded(self) -> list[str]:
        return [name for name, r in self.exercises.items() if r.grader_error]

    def to_json(self) -> dict:
        return {"submission": self.submission, "score": self.score, "max_score": self.max_score,
                "not_graded": self.not_graded,
                "exercises": {name: {"status": r.status, "passed": r.passed, "message": r.message,
                                     "used": list(r.used), "figure": r.figure, "speed": r.speed,
                                     "points": r.points, "max_points": r.max_points}
                              for name, r in self.exercises.items()}}


def timeout_text(message: str, timeout_s: float) -> str:
    if message.startswith("Timeout"):
        return f"timed out after {timeout_s:g} s (an endless loop, or too slow)"
    return message


def exercise_result(ex_record: dict | None, serve_record: dict | None, timeout_s: float,
                    named: list[str] = ()) -> ExerciseResult:
    """An exercise's result from the records of its submitted cell and its serve cell.

    The verdict is the one the check computed in the grading process (``serve_record["verdict"]``);
    what the cells printed is never read.
    """
    if ex_record is None:
        return not_graded("grading did not finish this exercise (no record of its cell)")
    if ex_record.get("grader_error"):
        return not_graded(ex_record["message"])
    if not ex_record["passed"]:  # the learner's cell failed: what the check did after it does not matter
        return ExerciseResult(False, f"exercise cell: {timeout_text(ex_record['message'], timeout_s)}")
    if serve_record is None:
        return not_graded("grading did not finish this exercise (no record of its check)")
    if serve_record.get("grader_error"):
        return not_graded(serve_record.get("why") or serve_record["message"])
    verdict = serve_record.get("verdict")
    used = tuple(sorted(set(serve_record.get("used") or ()) | set(named)))
    flag = "".join(f" · used `{name}`" for name in used)
    if not serve_record["passed"]:  # the function crashed, hung or hit a limit while answering
        return ExerciseResult(False, f"check: {timeout_text(serve_record['message'], timeout_s)}{flag}", used)
    if verdict is None:
        return ExerciseResult(False, f"check: {serve_record.get('why') or 'no verdict'}{flag}", used)
    if verdict.get("needs"):  # the check could not run here (a kernel exercise on a grader without a GPU)
        return ExerciseResult(False, f"{NOT_GRADED_HERE_PREFIX}needs {verdict['needs']}", used, grader_error=True)
    hint = " (the memory limit of a worker; --memory-mb)" if "raised MemoryError" in verdict["line"] else ""
    figure = str(verdict.get("figure") or "")
    speed = verdict.get("floor_met")
    return ExerciseResult(bool(verdict["passed"]), f"{verdict['line']}{hint}{flag}", used, figure,
                          speed=None if speed is None else bool(speed))


def segment_result(cells: list[NotebookNode], records: list[dict | None], timeout_s: float,
                   named: list[str] = (), crashed: str = "") -> ExerciseResult:
    """The result of one exercise's segment: its setup cell, context cells, exercise cell and serve cell.

    ``records[i]`` is the record of ``cells[i]`` (None when there is none); ``crashed`` says why the pytest
    process that ran this notebook exited abnormally ("" when it did not). A context cell that timed out or
    died decides the result, naming the cell: not graded when no code of the learner's had run in this segment
    yet, else a fail. A context cell that raised is named beside a failing result (the learner's function may
    still have passed without what it computes).
    """
    context = list(zip(cells[:-2], records[:-2], strict=True))
    ex_record, serve_record = records[-2], records[-1]
    learner_ran, raised = False, ""
    for cell, record in context:
        origin = cell.metadata.get(ORIGIN_KEY)
        learner = bool(origin and origin.get("exercise"))
        if record is None or record["passed"]:
            learner_ran |= learner and record is not None
            continue
        if record.get("grader_error"):
            return not_graded(record["message"])
        stopped = record.get("timed_out") or record.get("died")
        message = record["message"] or "no message"
        how = (f"timed out after {timeout_s:g} s" if record.get("timed_out")
               else f"stopped the kernel ({message})" if record.get("died") else f"raised {message}")
        text = f"{cell_name(cell)} {how}, before your exercise ran"
        if stopped:
            return ExerciseResult(False, text) if learner or learner_ran else not_graded(text)
        raised = raised or text
    if crashed and (ex_record is None or (ex_record["passed"] and serve_record is None)):
        return not_graded(crashed)
    result = exercise_result(ex_record, serve_record, timeout_s, named)
    if raised and result.status == FAIL_STATUS:
        return ExerciseResult(False, f"{result.message} (note: {raised})", result.used, result.figure,
                              speed=result.speed)
    return result


def cell_name(cell: NotebookNode) -> str:
    """``the lesson's cell [14] (`results = sweep(...)`)``, ``your cell of exercise x (...)``, or the setup cell."""
    origin = cell.metadata.get(ORIGIN_KEY)
    if origin is None:
        return "the grader's setup cell"
    lines = [line.strip() for line in cell.source.splitlines()]
    code = [line for line in lines if line and not line.startswith(("#", "%", "!"))]
    first = next((line for line in code if not line.startswith(("import ", "from "))), code[0] if code else "")
    snippet = first if len(first) <= 40 else first[:37] + "..."
    snippet = snippet.replace("`", "'")
    if origin.get("exercise"):
        return f"your cell of exercise {origin['exercise']} (`{snippet}`)"
    number = f"[{origin['count']}]" if origin.get("count") else f"#{origin['cell'] + 1}"
    return f"the lesson's cell {number} (`{snippet}`)"
