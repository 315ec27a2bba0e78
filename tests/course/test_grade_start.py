"""Does a worker kernel that dies at start-up get started again, and only then?

A kernel that exits before its first ``kernel_info`` reply has run no cell, so the submission cannot be the
cause (on a loaded machine another process can take one of the TCP ports jupyter_client picked for it). The
grader starts it again; a kernel that keeps dying is reported once, as the grader's failure.
"""

import sys

import pytest
from nbval.kernel import CURRENT_ENV_KERNEL_NAME

from mlsys_lab.course import nbval_report

DIES_FIRST = """
import runpy, sys
from pathlib import Path
marker = Path(sys.argv[1])
if not marker.exists():
    marker.write_text("died once")
    sys.exit(3)
sys.argv = [sys.argv[0], *sys.argv[2:]]
runpy.run_module("mlsys_lab.course.worker", run_name="__main__")
"""


def test_a_kernel_that_dies_before_its_first_reply_is_started_again(tmp_path, monkeypatch, capfd):
    marker = tmp_path / "marker"
    monkeypatch.setattr(nbval_report, "_worker_argv",
                        lambda: [sys.executable, "-c", DIES_FIRST, str(marker), "-f", "{connection_file}"])
    manager, client = nbval_report._start_worker(startup_timeout=120, kernel_name=CURRENT_ENV_KERNEL_NAME,
                                                 cwd=str(tmp_path))
    try:
        assert marker.read_text() == "died once"
        assert client.execute_interactive("x = 6 * 7", timeout=60)["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "died at start-up" in capfd.readouterr().err


def test_a_kernel_that_always_dies_is_reported_after_a_few_attempts(tmp_path, monkeypatch):
    starts = tmp_path / "starts"
    always = f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"
    monkeypatch.setattr(nbval_report, "_worker_argv", lambda: [sys.executable, "-c", always, "{connection_file}"])
    with pytest.raises(RuntimeError, match=f"died at start-up {nbval_report.START_ATTEMPTS} times"):
        nbval_report._start_worker(startup_timeout=120, kernel_name=CURRENT_ENV_KERNEL_NAME, cwd=str(tmp_path))
    assert starts.read_text() == "x" * nbval_report.START_ATTEMPTS
