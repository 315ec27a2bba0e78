"""Does `make lab` start a JupyterLab that serves the start page? (headless, on a free port)"""

import secrets
import shutil
import sys
from pathlib import Path

import pytest
from labserver import ROOT, free_port, http_get, lab_environment, running


@pytest.mark.slow
def test_make_lab_serves_the_start_page(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = Path(sys.prefix)
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip("run the tests from the course's virtual environment (make test)")
    port, token = free_port(), secrets.token_hex(16)
    flags = f"--no-browser --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token}"
    command = ["make", "-s", "lab", f"VENV={venv}", f"PORT={port}", f"LAB_FLAGS={flags}"]
    with running(command, port, token, ROOT, lab_environment(tmp_path)) as server:
        code, page = http_get(server.url("lab/tree/00_start_here.ipynb"))
        assert code == 200 and "JupyterLab" in page
        # Given a file, the server roots itself at the file's folder: the learner sees every handout (and no
        # solved lesson, which sits one folder up).
        code, listing = http_get(server.url("api/contents"))
        assert code == 200 and '"00_start_here.ipynb"' in listing
