"""Can this machine grade, and how safely? ``mlsys-lab grade --self-test`` and ``--require-confinement``.

An instructor installs Python in many ways (a venv, conda, ``--user``, ``PYTHONPATH``, Colab's system
packages, a container with or without Landlock and seccomp). Before a class is graded, the self-test answers
two questions on *this* install:

1. Which protections hold (:func:`mlsys_lab.course.protections.probe_protections`: a confined process tries to
   read a file outside its folder, dial a TCP port, fork, and read the grader's environment)?
2. Does grading work: the lesson's own solved notebook scores full marks and its handout scores zero?

``--require-confinement`` grades only when every protection holds; without it, grading goes on and says on
stderr which did not.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlsys_lab.course import protections
from mlsys_lab.course.grade import grade
from mlsys_lab.course.student import write_student_versions


def protections_text(report: dict[str, dict]) -> str:
    """One line per protection: held or not, and how."""
    return "\n".join(f"  {'held    ' if r['held'] else 'NOT HELD'}  {layer}: {r['detail']}"
                     for layer, r in report.items())


def missing(report: dict[str, dict]) -> list[str]:
    """The protections that did not hold."""
    return [layer for layer, r in report.items() if not r["held"]]


def check_confinement(require: bool) -> tuple[bool, str]:
    """Probe this machine's protections: (may grade, what to tell the instructor)."""
    report = protections.probe_protections()
    lacking = missing(report)
    if not lacking:
        return True, ""
    text = (f"the grading workers' protections that do not hold on this machine: {', '.join(lacking)}\n"
            f"{protections_text(report)}")
    if require:
        return False, f"{text}\nrefusing to grade (--require-confinement)"
    return True, f"{text}\ngrading anyway: a hand-in could reach what these protect (--require-confinement refuses)"


def self_test(reference: Path, jobs: int | None = None, timeout_s: float = 120.0) -> tuple[bool, str]:
    """Grade ``reference`` (solved) and its handout here: (full marks and zero as expected, the report)."""
    report = protections.probe_protections()
    lines = [f"protections on this machine ({len(report) - len(missing(report))}/{len(report)} held):",
             protections_text(report)]
    with tempfile.TemporaryDirectory(prefix="mlsys_lab_self_test_") as folder:
        handout = write_student_versions(reference, Path(folder) / reference.name)[0]
        solved, student = grade([reference, handout], reference, timeout_s=timeout_s, jobs=jobs)
    ok = solved.score == solved.max_score > 0 and student.score == 0 and not solved.not_graded
    lines.append(f"the solved lesson:  {solved.score}/{solved.max_score}"
                 f"{'' if solved.score == solved.max_score else '  (expected full marks)'}")
    lines += [f"    {name}: {result.message}" for name, result in solved.exercises.items() if not result.passed]
    lines.append(f"its handout:        {student.score}/{student.max_score}"
                 f"{'' if student.score == 0 else '  (expected zero)'}")
    lines.append("self-test passed: this machine grades" if ok else "self-test FAILED: this machine does not grade")
    return ok, "\n".join(lines)
