"""Does every install grade? ``mlsys-lab grade --self-test`` on the ways instructors install Python.

Each case builds an install unlike the course's ``.venv`` from the packages already in it (symbolic links, and
a real copy of ``mlsys_lab``, so that nothing is downloaded) and runs the self-test with that interpreter:

- packages on ``PYTHONPATH`` outside the interpreter's prefix, ``mlsys_lab`` among them, as a
  ``pip install --target DIR`` leaves them (the H200 machine's install, where grading once could not start);
- a user site (``pip install --user``, found through ``PYTHONUSERBASE``);
- a venv made with ``--system-site-packages``;
- a machine whose kernel offers no confinement: grading still works and says so, ``--require-confinement``
  refuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "notebooks" / "00_start_here.ipynb"
SITE = Path(sysconfig.get_paths()["purelib"])
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = pytest.mark.slow


def _fill(target: Path) -> None:
    """``target`` gets every package of this environment (links) and a copy of ``mlsys_lab`` (no editable hook)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in SITE.iterdir():
        if "mlsys_lab" in entry.name or entry.name.startswith("__editable__") or entry.name == "__pycache__":
            continue
        (target / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "mlsys_lab", target / "mlsys_lab", ignore=shutil.ignore_patterns("__pycache__"))


def _bare_venv(folder: Path, system_site: bool = False) -> Path:
    venv.EnvBuilder(with_pip=False, system_site_packages=system_site, symlinks=True).create(folder)
    return folder / "bin" / "python"


def _install(kind: str, tmp: Path) -> tuple[Path, dict[str, str]]:
    """(the interpreter, the environment) of an install of ``kind``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUSERBASE", "VIRTUAL_ENV")}
    if kind == "PYTHONPATH outside the prefix":
        python = _bare_venv(tmp / "bare")
        _fill(tmp / "target")
        env["PYTHONPATH"] = str(tmp / "target")
    elif kind == "user site":
        python = _bare_venv(tmp / "bare", system_site=True)  # a venv without system packages has no user site
        _fill(tmp / "userbase" / "lib" / VERSION / "site-packages")
        env["PYTHONUSERBASE"] = str(tmp / "userbase")
    elif kind == "venv with --system-site-packages":
        python = _bare_venv(tmp / "venv", system_site=True)
        (tmp / "venv" / "lib" / VERSION / "site-packages").rmdir()
        _fill(tmp / "venv" / "lib" / VERSION / "site-packages")
    else:
        raise ValueError(kind)
    return python, env


def _mlsys_lab(python: Path, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "mlsys_lab.course.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("kind", ["PYTHONPATH outside the prefix", "user site", "venv with --system-site-packages"])
def test_self_test_passes_on_an_install_unlike_ours(kind, tmp_path):
    python, env = _install(kind, tmp_path)
    where = subprocess.run([str(python), "-c", "import mlsys_lab, ipykernel; print(mlsys_lab.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.returncode == 0 and str(tmp_path) in where.stdout, where.stderr  # really the install under test
    done = _mlsys_lab(python, env, tmp_path, "grade", "--self-test", "--reference", str(REFERENCE))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "self-test passed" in done.stdout and "the solved lesson:  2/2" in done.stdout, done.stdout
    assert "NOT HELD" not in done.stdout, done.stdout


def test_without_confinement_grading_says_so_and_can_be_refused(tmp_path):
    env = {**os.environ, "MLSYS_LAB_WORKER_CONFINEMENT": "off"}
    python = Path(sys.executable)
    done = _mlsys_lab(python, env, tmp_path, "grade", "--self-test", "--reference", str(REFERENCE))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "NOT HELD  files" in done.stdout and "NOT HELD  processes" in done.stdout, done.stdout
    assert "self-test passed" in done.stdout
    refused = _mlsys_lab(python, env, tmp_path, "grade", str(REFERENCE), "--reference", str(REFERENCE),
                         "--require-confinement")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "refusing to grade (--require-confinement)" in refused.stderr and "files" in refused.stderr
    warned = _mlsys_lab(python, env, tmp_path, "grade", str(REFERENCE), "--reference", str(REFERENCE))
    assert warned.returncode == 0 and "grading anyway" in warned.stderr, warned.stderr
