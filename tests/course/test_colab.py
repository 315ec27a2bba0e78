"""Does a lesson open on Colab? The badge, the setup cell (run in a bare venv with Colab faked), the pins."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from pins import pinned, pyproject_pins

from mlsys_lab import __version__
from mlsys_lab.course import colab
from mlsys_lab.course.student import student_version

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REQUIREMENTS = ROOT / colab.REQUIREMENTS_PATH
# In pyproject.toml but not installed on Colab, each for the reason binder/colab-requirements.txt gives.
NOT_ON_COLAB = {"jupyterlab", "ipykernel", "nbval", "nbformat", "nbclient"}


def colab_pins() -> dict[str, str]:
    lines = [line for line in REQUIREMENTS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return pinned(lines)


def test_colab_pins_agree_with_pyproject():
    """Is every Colab pin the project's own pin, and is every project pin either there or left out on purpose?"""
    ours, project = colab_pins(), pyproject_pins()
    assert {name: project.get(name) for name in ours} == ours
    assert set(ours) | NOT_ON_COLAB == set(project), "a new dependency: pin it for Colab or say why it is left out"
    assert not set(ours) & NOT_ON_COLAB
    comments = REQUIREMENTS.read_text()
    assert all(name in comments for name in NOT_ON_COLAB), "each left-out package is named with its reason"


def test_release_tag_is_the_package_version():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == version and colab.RELEASE_TAG == f"v{version}"


def test_badge_opens_the_handout_of_the_readme_repository():
    """Does the badge point at notebooks/student/<name> of the repository the README's Binder badge names?"""
    badge = colab.badge_markdown("notebooks/03_roofline.ipynb")
    assert badge == ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                     f"(https://colab.research.google.com/github/{colab.GITHUB_REPOSITORY}/blob/v{__version__}/"
                     "notebooks/student/03_roofline.ipynb)")
    assert colab.badge_markdown("notebooks/student/03_roofline.ipynb") == badge
    binder = re.findall(r"https://mybinder\.org/v2/gh/([^/]+/[^/]+)/", (ROOT / "README.md").read_text())
    assert binder and set(binder) == {colab.GITHUB_REPOSITORY}
    with pytest.raises(ValueError, match="notebook"):
        colab.handout_path("notebooks/03_roofline.py")


def test_readme_course_map_has_a_colab_badge_per_lesson():
    readme = (ROOT / "README.md").read_text()
    for path in LESSONS:
        assert colab.badge_markdown(path) in readme, f"{path.name} has no Colab badge in the README"


def _lesson_copy(tmp_path, name="00_start_here.ipynb") -> Path:
    """A copy of a lesson as it was before the command ran: no badge line, no setup cell."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nb.cells = [c for c in nb.cells if not colab.is_setup_cell(c)]
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    first_md.source = colab.BADGE_LINE.sub("", first_md.source).lstrip("\n")
    target = tmp_path / name
    nbformat.write(nb, target)
    return target


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_has_its_current_badge_and_setup_cell(path, tmp_path):
    """Has the command been run on every committed lesson (running it again changes nothing)?"""
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    assert colab.add_colab_cells(copy) is False, f"run: python -m mlsys_lab.course.colab {path}"


def test_insertion_is_idempotent_and_keeps_the_lesson(tmp_path):
    """Is the badge the first markdown line, the setup cell the first code cell (no outputs), and does a second run
    change nothing? Every other cell stays as it was."""
    path = _lesson_copy(tmp_path)
    before = nbformat.read(path, as_version=4)
    assert colab.main([str(path)]) == 0
    once = path.read_bytes()
    assert colab.add_colab_cells(path) is False and path.read_bytes() == once
    nb = nbformat.read(path, as_version=4)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    assert first_md.source.splitlines()[0] == colab.badge_markdown(path)
    assert first_md.source.count("colab-badge.svg") == 1
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert colab.is_setup_cell(setup) and "colab-setup" in setup.metadata["tags"]
    assert setup.source == colab.setup_cell_source() and setup.outputs == [] and setup.execution_count is None
    others = [c for c in nb.cells if not colab.is_setup_cell(c)]
    assert [c.source for c in others[1:]] == [c.source for c in before.cells[1:]]
    assert others[0].source.endswith(before.cells[0].source)


def test_insertion_updates_a_stale_badge_and_cell(tmp_path):
    path = _lesson_copy(tmp_path)
    colab.add_colab_cells(path)
    nb = nbformat.read(path, as_version=4)
    old_badge = colab.badge_markdown(path).replace(colab.RELEASE_TAG, "v0.0.1")
    nb.cells[0].source = nb.cells[0].source.replace(colab.badge_markdown(path), old_badge)
    next(c for c in nb.cells if colab.is_setup_cell(c)).source = "print('old setup')"
    nbformat.write(nb, path)
    assert colab.add_colab_cells(path) is True
    nb = nbformat.read(path, as_version=4)
    assert "v0.0.1" not in nb.cells[0].source and nb.cells[0].source.count("colab-badge.svg") == 1
    assert [c.source for c in nb.cells if colab.is_setup_cell(c)] == [colab.setup_cell_source()]


def test_a_re_executed_notebook_stays_as_it_is(tmp_path):
    """After `make execute` the setup cell has a count (and no output, off Colab): running the command again keeps
    the file; a stale cell's outputs are dropped."""
    path = _lesson_copy(tmp_path)
    colab.add_colab_cells(path)
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if colab.is_setup_cell(c))
    setup.execution_count = 1
    nbformat.write(nb, path)
    assert colab.add_colab_cells(path) is False
    setup.outputs = [nbformat.v4.new_output("stream", name="stdout", text="from Colab\n")]
    nbformat.write(nb, path)
    assert colab.add_colab_cells(path) is True
    assert next(c for c in nbformat.read(path, as_version=4).cells if colab.is_setup_cell(c)).outputs == []


def test_student_version_keeps_badge_and_setup_cell(tmp_path):
    path = _lesson_copy(tmp_path)
    colab.add_colab_cells(path)
    handout = student_version(nbformat.read(path, as_version=4))
    assert handout.cells[0].source.startswith(colab.badge_markdown(path))
    assert next(c for c in handout.cells if c.cell_type == "code").source == colab.setup_cell_source()


def test_command_refuses_what_is_not_a_notebook(tmp_path, capsys):
    assert colab.main([str(tmp_path / "missing.ipynb")]) == 2
    assert "not a notebook" in capsys.readouterr().err


# A driver run by a bare venv's Python: fakes what the test asks for, runs the cell, reports what it did.
DRIVER = textwrap.dedent("""
    import contextlib, io, json, os, sys, types
    mode, cell_file, fakes = sys.argv[1], sys.argv[2], sys.argv[3]
    calls, widget_manager = [], []
    class Done:
        returncode = 0
    fake_subprocess = types.ModuleType("subprocess")
    fake_subprocess.run = lambda argv, **kw: calls.append({"argv": argv, "check": kw.get("check")}) or Done()
    sys.modules["subprocess"] = fake_subprocess  # pip is never really run
    if mode in ("colab-module", "colab-env"):
        sys.path.insert(0, fakes)  # google/colab/output.py records the widget-manager call
        if mode == "colab-module":
            import google.colab  # Colab's kernel imports it before any cell runs
    if mode == "stale-numpy":
        sys.path.insert(0, fakes)
        sys.modules["numpy"] = types.SimpleNamespace(__version__="1.26.4")  # imported before the upgrade
        import google.colab
    namespace, out = {}, io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(open(cell_file).read(), "setup-cell", "exec"), namespace)
    output = sys.modules.get("google.colab.output")
    names = sorted(k for k in namespace if k[0] != "_")
    print(json.dumps({"executable": sys.executable, "calls": calls, "stdout": out.getvalue(), "names": names,
                      "widget_manager": getattr(output, "CALLS", None),
                      "course_importable": __import__("importlib.util").util.find_spec("mlsys_lab") is not None}))
""")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A fresh virtual environment without the course or any package (no network: nothing is installed)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv / "bin" / "python"


def run_cell(python: Path, tmp_path: Path, mode: str, env: dict | None = None) -> dict:
    (tmp_path / "cell.py").write_text(colab.setup_cell_source())
    (tmp_path / "driver.py").write_text(DRIVER)
    fakes = tmp_path / "fakes"
    (fakes / "google" / "colab").mkdir(parents=True)
    (fakes / "google" / "__init__.py").write_text("")
    (fakes / "google" / "colab" / "__init__.py").write_text("")
    (fakes / "google" / "colab" / "output.py").write_text(
        "CALLS = []\ndef enable_custom_widget_manager():\n    CALLS.append('enable_custom_widget_manager')\n")
    dist = fakes / "numpy-2.4.6.dist-info"  # what pip would have installed: importlib.metadata finds it
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.4.6\n")
    done = subprocess.run([str(python), str(tmp_path / "driver.py"), mode, str(tmp_path / "cell.py"),
                           str(fakes)], capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env or {})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _expected_pip_calls(python: Path) -> list[dict]:
    tag, repo = colab.RELEASE_TAG, colab.GITHUB_REPOSITORY
    pip = [str(python), "-m", "pip", "install", "-q"]
    return [{"argv": pip + ["-r", f"https://raw.githubusercontent.com/{repo}/{tag}/{colab.REQUIREMENTS_PATH}"],
             "check": True},
            {"argv": pip + ["--no-deps", f"git+https://github.com/{repo}@{tag}"], "check": True}]


def test_setup_cell_does_nothing_off_colab(bare_python, tmp_path):
    report = run_cell(bare_python, tmp_path, "plain")
    assert report["course_importable"] is False, "the venv must not have the course"
    assert report.pop("executable").startswith(str(bare_python.parent))
    assert report == {"calls": [], "stdout": "", "names": ["os", "sys"], "widget_manager": None,
                      "course_importable": False}


@pytest.mark.parametrize("mode", ["colab-module", "colab-env"])
def test_setup_cell_installs_the_pinned_course_on_colab(bare_python, tmp_path, mode):
    """Detected by the imported google.colab or by COLAB_RELEASE_TAG alone: two pip calls (the pins, then the course
    at the tag without its desktop dependencies), the widget manager on, one line printed."""
    env = {"COLAB_RELEASE_TAG": "release-colab-20261201"} if mode == "colab-env" else {}
    report = run_cell(bare_python, tmp_path, mode, env)
    assert report["calls"] == _expected_pip_calls(Path(report["executable"]))
    assert report["widget_manager"] == ["enable_custom_widget_manager"]
    assert report["stdout"] == f"mlsys-lab {colab.RELEASE_TAG} installed, widgets on\n"


def test_setup_cell_asks_for_a_restart_when_numpy_was_already_imported(bare_python, tmp_path):
    report = run_cell(bare_python, tmp_path, "stale-numpy")
    assert report["stdout"].count("\n") == 1 and report["stdout"].rstrip().endswith("restart the session (new NumPy)")
