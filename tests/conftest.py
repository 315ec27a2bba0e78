"""Shared fixtures: a JupyterLab server on a free loopback port with a one-off token."""

from __future__ import annotations

import contextlib
import secrets
import sys
from pathlib import Path

import pytest
from labserver import free_port, jupyter_lab_command, lab_environment, running


@pytest.fixture(scope="session")
def lab_server_factory(tmp_path_factory):
    """Start JupyterLab on a folder: ``with lab_server_factory(root) as server: ...``."""
    if not Path(sys.executable).with_name("jupyter").exists():
        pytest.skip("JupyterLab is not installed in this environment (run the tests with `make test`)")

    @contextlib.contextmanager
    def start(root_dir: Path, prepare=None):
        """``prepare(tmp)`` may write settings (tmp/settings) or config (tmp/config) before the start."""
        port, token = free_port(), secrets.token_hex(16)
        tmp = tmp_path_factory.mktemp("lab")
        if prepare:
            prepare(tmp)
        with running(jupyter_lab_command(port, token, root_dir), port, token, root_dir, lab_environment(tmp)) as s:
            yield s

    return start
