"""A JupyterLab server for tests: free loopback port, one-off token, its own config and settings folders."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What make would run, without its "Entering directory" lines (printed when the tests run under `make test`).
MAKE_N = ("make", "--no-print-directory", "-n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


@dataclass
class LabServer:
    base_url: str
    token: str
    process: subprocess.Popen

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"


def wait_until_serving(server: LabServer, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited early:\n{server.process.stdout.read().decode()[-3000:]}")
        with contextlib.suppress(OSError):
            if http_get(server.url("api/status"))[0] == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer within {seconds} s")


@contextlib.contextmanager
def running(command: list[str], port: int, token: str, cwd: Path, env: dict):
    """Start a server command in its own process group; stop the whole group afterwards."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", token, process)
    try:
        wait_until_serving(server)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def lab_environment(tmp: Path) -> dict:
    """Config and runtime folders of its own, so a test server never reads a learner's settings."""
    return {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "MLSYS_LAB_BACKEND": os.environ.get("MLSYS_LAB_BACKEND", "auto")}


def jupyter_lab_command(port: int, token: str, root_dir: Path) -> list[str]:
    jupyter = Path(sys.executable).with_name("jupyter")
    flags = [f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", "--no-browser",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
             "--ServerApp.open_browser=False", "--LabApp.news_url=''", "--LabApp.check_for_updates_class="
             "jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        flags.append("--allow-root")
    return [str(jupyter), "lab", *flags]


