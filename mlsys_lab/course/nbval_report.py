"""A pytest plugin the grader loads next to nbval: cell results to a JSON-lines file, crash-safe kernels.

``python -m pytest -p mlsys_lab.course.nbval_report --grading-report FILE --nbval-lax ...`` writes one
JSON object per executed notebook cell: the notebook, the cell number, the outcome, what the cell
printed, and why it failed. Output comparison is narrowed to stdout (the grader's sanitize file then
keeps only verdict lines there). Three additions make nbval safe for untrusted code:

- a cell whose metadata carries ``SEGMENT_KEY`` (written by the grader, never taken from a
  submission) starts a fresh kernel when the previous cells killed the kernel, asked it to exit or
  timed out, so one exercise's crash or endless loop does not fail the exercises after it;
- a dead kernel (``os._exit``, a segfault, ``os.kill(os.getpid(), 9)``) is noticed within a fraction of
  a second instead of after the whole cell timeout (nbval waits for a reply that never comes);
- a watchdog kills the kernel process when a cell outlives its timeout by ``HARD_LIMIT_GRACE_S``
  (code that ignores the interrupt nbval sends would otherwise hold the grader forever).
"""

from __future__ import annotations

import json
import threading
import time
from queue import Empty

import pytest
from nbformat import NotebookNode

SEGMENT_KEY = "mlsys_lab_segment"  # metadata key the grader puts on the first cell of each exercise

POLL_S = 0.25
HARD_LIMIT_GRACE_S = 1.0


class KernelDied(RuntimeError):
    """The kernel process exited while a cell was running."""


def _await_reply(self, msg_id: str, timeout: float | None = None) -> None:
    """nbval's RunningKernel.await_reply, polling so that a dead kernel ends the wait at once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        if wait <= 0:
            raise Empty
        try:
            msg = self.get_message(stream="shell", timeout=wait)
        except Empty:
            if not self.is_alive():
                self.kc.stop_channels()
                raise KernelDied("the kernel died while running this cell "
                                 "(a crash, os._exit, or the process was killed)") from None
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            # exit() or quit() in a cell: the kernel replies, then shuts down a moment later.
            if any(p.get("source") == "ask_exit" for p in msg["content"].get("payload", [])):
                self.exit_requested = True
            return


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--grading-report", default=None, help="JSON-lines file for per-cell results")


def _stdout_only(outputs: list) -> list:
    return [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--grading-report"):
        from nbval.kernel import RunningKernel
        from nbval.plugin import IPyNbCell

        RunningKernel.await_reply = _await_reply
        compare = IPyNbCell.compare_outputs

        def compare_stdout(self, test, ref, skip_compare=None):
            """Compare what the check printed on stdout only (a warning or a figure is no verdict)."""
            return compare(self, _stdout_only(test), _stdout_only(ref), skip_compare)

        IPyNbCell.compare_outputs = compare_stdout


def _kernel_name(config: pytest.Config, notebook: NotebookNode) -> str:
    """The kernel nbval would start for this notebook (same rule as nbval's IPyNbFile.setup)."""
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME

    if config.option.nbval_current_env:
        return CURRENT_ENV_KERNEL_NAME
    return config.option.nbval_kernel_name or notebook.metadata.get("kernelspec", {}).get("name", "python")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """At a segment start, replace a dead or timed-out kernel before nbval looks at it."""
    from nbval.kernel import RunningKernel

    notebook = item.parent
    cell = getattr(item, "cell", None)
    if not item.config.getoption("--grading-report") or cell is None or SEGMENT_KEY not in cell.metadata:
        return  # not grading, or not a segment start
    if notebook.kernel is None:
        return  # the first cell: nbval starts the first kernel itself
    healthy = notebook.kernel.is_alive() and not getattr(notebook.kernel, "exit_requested", False)
    if healthy and not notebook.timed_out:
        return
    old = notebook.kernel
    try:
        if old.is_alive():
            old.stop()
        else:
            old.kc.stop_channels()
    except Exception:  # nbval stopped it already
        pass
    option = item.config.option
    notebook.kernel = RunningKernel(_kernel_name(item.config, notebook.nb), cwd=str(notebook.path.parent),
                                    startup_timeout=option.nbval_kernel_startup_timeout)
    notebook.timed_out = False


def _kill_kernel(item: pytest.Item) -> None:
    kernel = getattr(item.parent, "kernel", None)
    manager = getattr(kernel, "km", None)
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    if process is not None:
        process.kill()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if not item.config.getoption("--grading-report") or not hasattr(item, "cell_num"):
        yield
        return
    limit_s = item.config.getoption("--nbval-cell-timeout") + HARD_LIMIT_GRACE_S
    watchdog = threading.Timer(limit_s, _kill_kernel, args=(item,))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


def _failure_message(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> str:
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    path = item.config.getoption("--grading-report")
    if not path or not hasattr(item, "cell_num"):
        return
    if call.when == "teardown" or (call.when == "setup" and report.passed):
        return
    outputs = getattr(item, "test_outputs", None) or []
    record = {
        "notebook": item.path.name,
        "cell": item.cell_num,
        "when": call.when,
        "passed": report.passed and not hasattr(report, "wasxfail"),
        "stdout": "".join(o.get("text", "") for o in outputs
                          if o.get("output_type") == "stream" and o.get("name") == "stdout"),
        "message": "" if report.passed else _failure_message(item, call, report),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
