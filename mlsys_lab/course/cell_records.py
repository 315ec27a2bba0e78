"""The record of one graded cell, as the nbval plugin (:mod:`mlsys_lab.course.nbval_report`) writes it.

One JSON object per executed cell: the notebook, the cell number, whether it passed, what it printed on stdout,
one line saying why it failed, and how it stopped, from the grading process's own state (never from what the
kernel printed): ``timed_out`` (this cell ran out of time), ``died`` (the kernel process ended while it ran),
``grader_error`` (the grader failed, not the submission: the check raised in the grading process, or a worker
kernel could not start). A serve cell's record adds the check's verdict. :mod:`mlsys_lab.course.results` reads
them.
"""

from __future__ import annotations

import pytest


class KernelDied(RuntimeError):
    """The kernel process exited while a cell was running."""


class KernelStartFailed(RuntimeError):
    """The worker kernel could not be started: no code of the submission had run in it, so it is the grader's."""


def cell_record(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> dict | None:
    """The record of this phase of a cell, or None when there is nothing to record (a setup that passed)."""
    if call.when == "teardown" or (call.when == "setup" and report.passed):
        return None
    outputs = getattr(item, "test_outputs", None) or []
    exc = call.excinfo.value if call.excinfo is not None else None
    first_stop = call.when == "call" and not hasattr(report, "wasxfail")  # cells after a timeout run as xfail
    record = {
        "notebook": item.path.name,
        "cell": item.cell_num,
        "when": call.when,
        "passed": report.passed and not hasattr(report, "wasxfail"),
        "stdout": "".join(o.get("text", "") for o in outputs
                          if o.get("output_type") == "stream" and o.get("name") == "stdout"),
        "message": "" if report.passed else failure_message(item, call, report),
        "timed_out": bool(first_stop and getattr(item.parent, "timed_out", False)),
        "died": bool(first_stop and isinstance(exc, KernelDied)),
        # set by the grader's own code only: the check thread's except, or a kernel start that failed
        "grader_error": bool(getattr(item, "grader_error", False) or isinstance(exc, KernelStartFailed)),
    }
    if hasattr(item, "verdict"):
        verdict, why, used = item.verdict
        record["verdict"] = None if verdict is None else {"passed": verdict.passed, "line": verdict.line,
                                                          "figure": verdict.figure, "needs": verdict.needs,
                                                          "floor_met": verdict.floor_met}
        record["why"], record["used"] = why, used
    return record


def failure_message(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> str:
    """One line: the learner's exception, a timeout, a dead kernel, or why nbval failed the cell."""
    if report.skipped:
        return "skipped"
    outputs = getattr(item, "test_outputs", None) or []
    errors = [o for o in outputs if o.get("output_type") == "error"]
    exc = call.excinfo.value if call.excinfo else None
    text = str(exc) if exc is not None else ""
    if errors and "Timeout" not in text:
        return f"{errors[-1]['ename']}: {errors[-1]['evalue']}".strip()
    if isinstance(exc, RuntimeError) and "Kernel dead" in text:
        return "the kernel had died before this cell"
    return text.splitlines()[0] if text else "failed"
