"""Would a Binder launch work? Everything about it that can be checked offline, or against PyPI alone."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pins import environment_pins, pyproject_pins

ROOT = Path(__file__).resolve().parents[2]
START_PAGE = "notebooks/00_start_here.ipynb"


def test_readme_binder_badge_opens_the_start_page_in_lab():
    """The badge opens the start page's handout (postBuild writes it); the solved start page is the other link."""
    readme = (ROOT / "README.md").read_text()
    badge = re.search(r"\[!\[Binder\]\([^)]*\)\]\((https://mybinder\.org/v2/gh/[^)\s]+)\)", readme)
    assert badge, "README has a Binder badge"
    assert badge.group(1).endswith("urlpath=lab/tree/notebooks/student/00_start_here.ipynb")
    links = re.findall(r"\((https://mybinder\.org/v2/gh/[^)\s]+)\)", readme)
    assert set(links) == {badge.group(1), badge.group(1).replace("notebooks/student/", "notebooks/")}
    assert (ROOT / START_PAGE).exists()
    assert "mlsys-lab student notebooks notebooks/student" in (ROOT / "binder" / "postBuild").read_text()


def test_binder_image_is_lean():
    text = (ROOT / "binder" / "environment.yml").read_text().lower()
    assert "cupy" not in text and "cuda" not in text and "nvidia" not in text


@pytest.mark.slow
def test_repo2docker_plans_an_image_from_the_binder_files():
    repo2docker = Path(sys.executable).with_name("repo2docker")
    if not repo2docker.exists():
        pytest.skip("jupyter-repo2docker is not installed (it is in the test extras)")
    dockerfile = subprocess.run([str(repo2docker), "--no-build", "--debug", str(ROOT)], capture_output=True,
                                text=True, timeout=120).stdout
    assert 'env update -p ${NB_PYTHON_PREFIX} --file "binder/environment.yml"' in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile


@pytest.mark.slow
@pytest.mark.exhaustive  # the pins equal pyproject's in the quick lane too (test_packaging.py); PyPI only here
def test_pip_resolves_exactly_the_pinned_set(tmp_path):
    """A dry-run install of environment.yml's list resolves every pin to itself (needs PyPI)."""
    pins = environment_pins(ROOT / "binder" / "environment.yml")
    assert pins == pyproject_pins()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(f"{k}=={v}" for k, v in pins.items()))
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                             "--report", str(report), "-r", str(requirements)], capture_output=True, text=True)
    if result.returncode != 0 and "NewConnectionError" in result.stderr + result.stdout:
        pytest.skip("no connection to the package index")
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    assert {k: resolved.get(k) for k in pins} == pins


@pytest.mark.slow
def test_postbuild_runs_in_a_fresh_environment(tmp_path):
    """postBuild installs the course and writes student versions; run it in a new venv on a copy of the repo."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    repo = tmp_path / "repo"
    for name in files:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The new environment sees the dependencies already installed here (Binder's come from environment.yml).
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    new_site = next((venv / "lib").glob("python3*/site-packages"))
    (new_site / "deps.pth").write_text(str(site) + "\n")
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(["./binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    students = sorted(p.name for p in (repo / "notebooks" / "student").glob("*.ipynb"))
    assert students == sorted(p.name for p in (repo / "notebooks").glob("*.ipynb"))
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import mlsys_lab, sys; print(mlsys_lab.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert check.stdout.strip().startswith(str(repo)), "the course was installed from the copy, editable"
