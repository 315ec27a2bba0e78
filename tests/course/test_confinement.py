"""Does the worker's confinement open what Python needs and nothing of the course's answers?"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlsys_lab.course import confinement


def _write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_folder_holding_the_course_opens_only_what_distributions_installed(tmp_path):
    """Is a checkout on PYTHONPATH opened for its installed packages only, not its notebooks or tests?"""
    _write(tmp_path / "notebooks" / "00_start_here.ipynb", "{}")
    _write(tmp_path / "tests" / "conftest.py")
    _write(tmp_path / "mlsys_lab" / "__init__.py")
    _write(tmp_path / "numpy" / "__init__.py")
    _write(tmp_path / "numpy-2.0.dist-info" / "RECORD", "numpy/__init__.py,sha256=x,1\n../../bin/f2py,,\n")
    _write(tmp_path / "six.py")
    _write(tmp_path / "six-1.16.dist-info" / "RECORD", "six.py,,\nsix-1.16.dist-info/RECORD,,\n")
    _write(tmp_path / "mlsys_lab-0.1.dist-info" / "RECORD", "mlsys_lab/__init__.py,,\n")
    _write(tmp_path / "distutils-precedence.pth")
    entries = {Path(p).name for p in confinement.installed_entries(str(tmp_path))}
    assert entries == {"numpy", "numpy-2.0.dist-info", "six.py", "six-1.16.dist-info", "mlsys_lab-0.1.dist-info",
                       "distutils-precedence.pth"}


@pytest.mark.parametrize("pythonpath", [False, True], ids=["installed", "checkout on PYTHONPATH"])
def test_the_checks_and_the_checkout_are_out_of_reach(pythonpath, tmp_path):
    """In a fresh interpreter (as a worker starts), are mlsys_lab/exercises, the solved notebooks and the tests
    outside every readable path, also when the checkout itself is on PYTHONPATH (the H200 machine's install)?"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)} if pythonpath else dict(os.environ)
    code = "from mlsys_lab.course.confinement import readable_paths\nfor p, _ in readable_paths('/x'): print(p)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    readable = [Path(line) for line in done.stdout.splitlines()]
    assert readable, done.stderr
    for secret in (root / "mlsys_lab" / "exercises" / "roofline.py", root / "notebooks" / "03_roofline.ipynb",
                   root / "tests" / "roofline" / "test_exercise_catalogue.py"):
        assert not any(secret == p or p in secret.parents for p in readable), secret


def test_the_environment_keeps_no_secret(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    monkeypatch.setenv("MLSYS_LAB_CHECK_SEED", "7")
    env = confinement.worker_environment({"MLSYS_LAB_GRADING_FD": "5"})
    assert "GITHUB_TOKEN" not in env and "MLSYS_LAB_CHECK_SEED" not in env and env["MLSYS_LAB_GRADING_FD"] == "5"


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
                    reason="the seccomp filter is built for Linux x86-64")
def test_the_filter_allows_threads_and_refuses_processes_sockets_and_limits():
    """In a process under the filter: threads run; fork, a TCP socket, a raised limit and a foreign signal fail."""
    code = """
import errno, os, resource, socket, threading
from mlsys_lab.course import confinement
held, text = confinement.seccomp("unix")
assert held, text
out = []
t = threading.Thread(target=lambda: out.append(1)); t.start(); t.join()
assert out == [1]
for attempt in (os.fork, lambda: socket.socket(socket.AF_INET),
                lambda: resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)),
                lambda: os.kill(os.getppid(), 0)):
    try:
        attempt()
    except (OSError, ValueError):
        continue
    raise SystemExit(f"allowed: {attempt}")
socket.socketpair()  # Unix sockets stay, until close_sockets()
confinement.close_sockets()
try:
    socket.socketpair()
    raise SystemExit("a socket after close_sockets")
except OSError:
    pass
resource.getrlimit(resource.RLIMIT_CPU)  # reading a limit is fine
os.kill(os.getpid(), 0)  # and so is a signal to itself
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stdout + done.stderr
