"""A pytest plugin the grader loads next to nbval: cell results to a JSON-lines file, crash-safe kernels.

``python -m pytest -p mlsys_lab.course.nbval_report --grading-report FILE --nbval-lax ...`` writes one
JSON object per executed notebook cell (:mod:`mlsys_lab.course.cell_records`: the outcome, why it failed,
whether it timed out, died, or failed by the grader's fault). Output comparison is narrowed to stdout (the
grader's sanitize file then keeps only verdict lines there). Three additions make nbval safe for untrusted code:

- a cell whose metadata carries ``SEGMENT_KEY`` (written by the grader, never taken from a
  submission) starts a fresh kernel when the previous cells killed the kernel, asked it to exit or
  timed out, so one exercise's crash or endless loop does not fail the exercises after it;
- a dead kernel (``os._exit``, a segfault, ``os.kill(os.getpid(), 9)``) is noticed within a fraction of
  a second instead of after the whole cell timeout (nbval waits for a reply that never comes);
- a watchdog kills the kernel process when a cell outlives its timeout by ``HARD_LIMIT_GRACE_S``
  (code that ignores the interrupt nbval sends would otherwise hold the grader forever).

And it makes nbval's kernels graded workers: each kernel is started by :mod:`mlsys_lab.course.worker`
(confined, with limits) and inherits one end of a fresh socket pair; while a cell marked ``SERVE_KEY``
runs, a thread of this (trusted) process runs the exercise's check over the other end
(:func:`mlsys_lab.course.checks.run_check`) and the record carries the verdict it computed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from queue import Empty

import pytest
from nbformat import NotebookNode

from mlsys_lab.course.cell_records import KernelDied, KernelStartFailed, cell_record
from mlsys_lab.course.checks import process_cpu_seconds
from mlsys_lab.course.confinement import worker_environment

SEGMENT_KEY = "mlsys_lab_segment"  # metadata key the grader puts on the first cell of each exercise
SERVE_KEY = "mlsys_lab_serve"  # metadata of a serve cell: {"lesson": slug, "exercise": name}
CHECK_GRACE_S = 2.0  # how long the check may go on after its serve cell ended (it then gets no answers)

POLL_S = 0.25
HARD_LIMIT_GRACE_S = 1.0
CPU_POLL_S = 0.1  # how often the grader reads a worker's CPU clock while a cell runs
MEMORY_ENV = "MLSYS_LAB_MEMORY_MB"
_STARTED: list = []  # every worker process this process started (each leads a process group of its own)


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
                raise KernelDied(_death(self.km)) from None
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            # exit() or quit() in a cell: the kernel replies, then shuts down a moment later.
            if any(p.get("source") == "ask_exit" for p in msg["content"].get("payload", [])):
                self.exit_requested = True
            return


def _death(manager) -> str:
    """Why the kernel process ended: the grader's CPU watchdog, a limit, or the learner's code."""
    exceeded = getattr(manager, "cpu_exceeded", None)
    if exceeded is not None:
        return f"CPU time limit exceeded ({exceeded:g} s of CPU per exercise; --cpu-seconds)"
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    code = process.poll() if process is not None else None
    if code == -signal.SIGSYS:
        return "the kernel was stopped by the grader's system-call filter (a refused system call)"
    return "the kernel died while running this cell (a crash, os._exit, or the process was killed)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--grading-report", default=None, help="JSON-lines file for per-cell results")
    parser.addoption("--grading-cpu-seconds", type=float, default=60.0, help="CPU seconds per exercise")
    parser.addoption("--grading-memory-mb", type=int, default=4096, help="memory (RLIMIT_DATA) of a worker, MB")


START_ATTEMPTS = 3  # a kernel that dies before its first reply is started again, up to this many times in all


class StartDied(RuntimeError):
    """The worker kernel exited before it answered ``kernel_info``: no cell had been sent to it yet."""


def _worker_argv() -> list[str]:
    """The command that starts a graded worker kernel (:func:`mlsys_lab.course.worker.main`)."""
    return [sys.executable, "-m", "mlsys_lab.course.worker", "-f", "{connection_file}"]


def _start_worker(startup_timeout: float = 60, kernel_name: str = "python", **kwargs):
    """nbval's start_new_kernel, launching :mod:`mlsys_lab.course.worker` with one end of a socket pair.

    A kernel that dies before its first reply has run no code of the learner's (nbval sends the first cell
    only after the reply), so its death cannot be the submission's doing. On a loaded machine it happens
    now and then: jupyter_client picks the kernel's five TCP ports by binding and releasing them, and in the
    seconds before the kernel binds them itself another process can take one (the kernel then exits with
    "Address already in use"). Such a kernel is started again, with fresh ports and a fresh socket pair.
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _start_worker_once(startup_timeout, kernel_name, **kwargs)
        except StartDied as died:
            if attempt == START_ATTEMPTS:
                raise RuntimeError(f"the grading kernel died at start-up {START_ATTEMPTS} times in a row, before "
                                   f"any cell ran (last: {died}); see the pytest log in --keep DIR") from None
            print(f"[grader] worker kernel died at start-up ({died}); starting it again", file=sys.stderr)


def _start_worker_once(startup_timeout: float, kernel_name: str, **kwargs):
    from jupyter_client import KernelManager
    from nbval.kernel import NbvalKernelspecManager

    class WorkerSpecs(NbvalKernelspecManager):
        def get_kernel_spec(self, name):
            spec = super().get_kernel_spec(name)
            spec.argv = _worker_argv()
            return spec

    ours, theirs = socket.socketpair()
    folder = os.path.realpath(kwargs.get("cwd") or os.getcwd())
    env = worker_environment({"MLSYS_LAB_GRADING_FD": str(theirs.fileno()), "MALLOC_ARENA_MAX": "2",
                              MEMORY_ENV: os.environ.get(MEMORY_ENV, "0")})
    # The kernel's channels are Unix sockets in its folder (the worker may make no TCP socket at all).
    ipc = os.path.join(folder, "kernel")
    if len(ipc) > 96:  # a Unix socket's path holds 108 bytes, with "-<port>" after it
        raise RuntimeError(f"the grading folder's path is too long for the kernel's sockets: {folder}")
    # The worker's stderr (what its confinement held, why it died) goes to the grader's folder, out of its reach.
    stderr_path = f"{folder}.worker.stderr"
    manager = KernelManager(kernel_name=kernel_name, kernel_spec_manager=WorkerSpecs(), transport="ipc", ip=ipc)
    kwargs.pop("stdout", None), kwargs.pop("stderr", None)  # nbval sends both to /dev/null
    with open(stderr_path, "a") as stderr:
        manager.start_kernel(env=env, pass_fds=(theirs.fileno(),), stdout=stderr, stderr=stderr, **kwargs)
    theirs.close()
    process = getattr(manager.provisioner, "process", None)
    if process is not None:
        _STARTED.append(process)
    manager.grading_socket = ours
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=startup_timeout)
    except RuntimeError as exc:
        client.stop_channels()
        process = getattr(manager.provisioner, "process", None)
        code = process.poll() if process is not None else None
        manager.shutdown_kernel(now=True)
        ours.close()
        if code is not None:  # it exited: not a timeout
            raise StartDied(f"{exc}, exit status {code}; its stderr ends: {_tail(stderr_path)}") from None
        raise
    return manager, client


def _tail(path: str, lines: int = 6) -> str:
    """The last lines of a worker's stderr, for a message."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:]) or "(nothing)"
    except OSError as exc:
        return f"(unreadable: {exc})"


def _stdout_only(outputs: list) -> list:
    return [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--grading-report"):
        import nbval.kernel
        from nbval.kernel import RunningKernel
        from nbval.plugin import IPyNbCell

        RunningKernel.await_reply = _await_reply
        nbval.kernel.start_new_kernel = _start_grading_kernel
        os.environ[MEMORY_ENV] = str(config.getoption("--grading-memory-mb"))
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """At a segment start: replace a dead or timed-out kernel before nbval looks at it, and once the kernel is
    there (nbval starts the first one itself), start the exercise's CPU budget at its CPU clock now."""
    cell = getattr(item, "cell", None)
    segment = bool(item.config.getoption("--grading-report")) and cell is not None and SEGMENT_KEY in cell.metadata
    if segment and item.parent.kernel is not None:
        _replace_if_unfit(item)
    yield
    kernel = getattr(item.parent, "kernel", None)
    if segment and kernel is not None:
        kernel.km.cpu_start = _cpu_seconds(kernel.km)


def _replace_if_unfit(item: pytest.Item) -> None:
    from nbval.kernel import RunningKernel

    notebook = item.parent
    healthy = (notebook.kernel.is_alive() and not getattr(notebook.kernel, "exit_requested", False)
               and not getattr(notebook.kernel.km, "grading_broken", False))
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


def _cpu_seconds(manager) -> float | None:
    """The worker's CPU clock, read from here (None when it is gone)."""
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    try:
        return process_cpu_seconds(process.pid) if process is not None else None
    except (OSError, ValueError):
        return None


def _watch_cpu(item: pytest.Item, stop: threading.Event) -> None:
    """Kill the worker when the exercise's CPU time (since its segment began) passes ``--grading-cpu-seconds``.

    The clock is read from outside, so nothing the learner's code does (ignoring SIGXCPU, changing limits)
    stretches the budget, and each exercise gets the whole budget whatever the earlier ones spent.
    """
    manager = getattr(getattr(item.parent, "kernel", None), "km", None)
    budget = item.config.getoption("--grading-cpu-seconds")
    start = getattr(manager, "cpu_start", None)
    if manager is None or start is None or budget <= 0:
        return
    while not stop.wait(CPU_POLL_S):
        used = _cpu_seconds(manager)
        if used is None:
            return
        if used - start > budget:
            manager.cpu_exceeded = budget
            manager.provisioner.process.kill()
            return


def pytest_unconfigure(config: pytest.Config) -> None:
    """No worker outlives grading: each one's process group is killed (a worker can make no process, but a
    kernel that ignores the shutdown request must not stay)."""
    for process in _STARTED:
        if process.poll() is None:  # still running: its pid is still its group's (a reaped one may be reused)
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass


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
    serve = item.cell.metadata.get(SERVE_KEY) if hasattr(item, "cell") else None
    manager = item.parent.kernel.km if serve else None  # nbval may drop it when it stops a timed-out kernel
    grader = _start_check(item, serve, limit_s) if serve else None
    watchdog.start()
    stop_cpu = threading.Event()
    threading.Thread(target=_watch_cpu, args=(item, stop_cpu), daemon=True).start()
    failed = True
    try:
        outcome = yield
        failed = outcome.excinfo is not None
    finally:
        watchdog.cancel()
        stop_cpu.set()
        if grader is not None:
            _finish_check(item, manager, grader, failed)


def _finish_check(item: pytest.Item, manager, grader: threading.Thread, cell_failed: bool) -> None:
    """Wait for the check thread; unblock it if the serve cell ended without serving to the end.

    A kernel whose conversation with the grader ended abnormally is replaced at the next segment (its
    socket may hold half a message), so the next exercise starts clean.
    """
    grader.join(0.5 if cell_failed else CHECK_GRACE_S)
    if grader.is_alive():  # the worker will not answer any more
        try:
            manager.grading_socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        grader.join()
    if item.verdict[0] is None:
        manager.grading_broken = True


def _start_check(item: pytest.Item, serve: dict, limit_s: float) -> threading.Thread:
    """Run the exercise's check in a thread of this process, talking to the worker over its socket."""
    from mlsys_lab.course.checks import run_check

    item.verdict = (None, "grading did not start", [])
    manager = item.parent.kernel.km
    sock = manager.grading_socket
    process = getattr(getattr(manager, "provisioner", None), "process", None)  # the kernel we started
    pid = getattr(process, "pid", None)

    def work() -> None:
        try:
            item.verdict = run_check(sock, serve["lesson"], serve["exercise"], limit_s,
                                     str(item.path.parent), pid)
        except Exception as exc:  # a bug of ours (or no memory here) must not pass or fail anyone: record it
            item.verdict = (None, f"the grader failed: {type(exc).__name__}: {exc}", [])
            item.grader_error = True  # set here only, never from what the worker sent or printed
            try:  # a worker still waiting for requests gets EOF at once, not the cell timeout
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    path = item.config.getoption("--grading-report")
    record = cell_record(item, call, outcome.get_result()) if path and hasattr(item, "cell_num") else None
    if record is not None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _start_grading_kernel(*args, **kwargs):
    """nbval's ``start_new_kernel``: :func:`_start_worker`, its failures marked as the grader's own."""
    try:
        return _start_worker(*args, **kwargs)
    except Exception as exc:
        raise KernelStartFailed(f"the worker kernel could not start: {exc}") from exc
