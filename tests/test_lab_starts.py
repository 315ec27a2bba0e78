"""Does `make lab` start a JupyterLab that serves the start page? (headless, on a free port)"""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.mark.slow
def test_make_lab_serves_the_start_page(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = Path(sys.prefix)
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip("run the tests from the course's virtual environment (make test)")
    port, token = free_port(), secrets.token_hex(16)
    flags = f"--no-browser --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token} --ServerApp.open_browser=False"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    server = subprocess.Popen(["make", "-s", "lab", f"VENV={venv}", f"PORT={port}", f"LAB_FLAGS={flags}"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, body = get(f"http://127.0.0.1:{port}/api/status?token={token}")
                break
            except OSError:
                time.sleep(0.5)
        assert status == 200, f"JupyterLab did not answer: {server.stdout.read1().decode() if server.poll() else ''}"
        code, page = get(f"http://127.0.0.1:{port}/lab/tree/00_start_here.ipynb?token={token}")
        assert code == 200 and "JupyterLab" in page
        # Given a file, the server roots itself at the file's folder: the learner sees every lesson.
        code, contents = get(f"http://127.0.0.1:{port}/api/contents/00_start_here.ipynb?token={token}")
        assert code == 200 and '"00_start_here.ipynb"' in contents
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
