"""Does every lesson work in a real browser: cells run, widgets render, sliders change the picture?

nbval proves that a notebook's kernel side runs; these tests prove what a learner sees in JupyterLab:
the widget frontend loads, every explorer draws, dragging a control redraws, and the student version
runs top to bottom with its exercises waiting. A lesson runs as its student version (which executes every
cell of the lesson except the solutions); the start page also runs in full to show the ✓ verdicts. A
screenshot per notebook lands in ``artifacts/browser/``.

Every explorer is an :class:`mlsys_lab.widgets.base.Explorer`, so the frontend path (widget comm, figure
redrawn on a drag) is the same for all of them; what each explorer computes is tested without a browser
(``tests/<slug>/test_widgets.py``, ``tests/widgets/test_nbval.py``). So the quick lane (``make test``) runs the
handout of :data:`QUICK_LESSONS`, one of the two lessons with the most explorers; ``make test-all`` runs
every handout (the others are marked exhaustive, see ``tests/lanes.py``), the start page in full, and the check
that a missing widget frontend is caught. ``MLSYS_LAB_BROWSER_LESSONS=all`` (or a comma-separated list of notebook
names) chooses the handouts in either lane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest
from lab_page import (
    WIDGET_MIME,
    cell_problems,
    explorers,
    move_a_control,
    open_notebook,
    run_all_cells,
    widget_problems,
    write_settings,
)

from mlsys_lab.course.notebook_cells import find_exercises

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
QUICK_LESSONS = ("08_parallelism.ipynb",)


def lessons_in_browser() -> list:
    """The handouts to run: MLSYS_LAB_BROWSER_LESSONS (``all`` or names), else all, those but QUICK_LESSONS
    marked exhaustive (run by ``make test-all`` only)."""
    chosen = os.environ.get("MLSYS_LAB_BROWSER_LESSONS", "").strip()
    names = [p.name for p in LESSONS]
    if not chosen:
        return [n if n in QUICK_LESSONS else pytest.param(n, marks=pytest.mark.exhaustive) for n in names]
    if chosen == "all":
        return names
    wanted = [n.strip() if n.strip().endswith(".ipynb") else n.strip() + ".ipynb" for n in chosen.split(",")]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise ValueError(f"MLSYS_LAB_BROWSER_LESSONS names no notebook: {unknown} (known: {names})")
    return wanted

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the course (never the committed notebooks: JupyterLab saves what it runs) + student versions."""
    folder = tmp_path_factory.mktemp("course")
    for path in LESSONS:
        shutil.copy(path, folder / path.name)
    result = subprocess.run([sys.executable, "-m", "mlsys_lab.course.cli", "student", str(folder),
                             str(folder / "student")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def lab(course, lab_server_factory):
    with lab_server_factory(course, prepare=lambda tmp: write_settings(tmp / "settings")) as server:
        yield server


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    yield page
    context.close()


def stored_explorer_count(path: Path) -> int:
    """How many explorers the executed notebook displays: widget outputs of cells that build an Explorer."""
    count = 0
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code" and "Explorer" in "".join(cell["source"]):
            count += sum(1 for o in cell.get("outputs", []) if WIDGET_MIME in o.get("data", {}))
    return count


def check_notebook_in_browser(page, lab, relative: str, artifacts_dir: Path) -> list[str]:
    shot = artifacts_dir / (relative.replace("/", "_").removesuffix(".ipynb") + ".png")
    try:
        # ?reset: a fresh workspace, so tabs of earlier notebooks do not reopen beside this one.
        open_notebook(page, lab.url(f"lab/tree/{relative}?reset"))
        run_all_cells(page)
    except Exception:
        page.screenshot(path=str(shot.with_suffix(".failed.png")))  # what the page showed when it gave up
        shut_down_kernels(lab)
        raise
    problems = cell_problems(page) + widget_problems(page)
    views = explorers(page)
    expected = stored_explorer_count(ROOT / "notebooks" / Path(relative).name)
    if len(views) < expected:
        problems.append(f"{expected} explorers displayed when the notebook was executed, {len(views)} drawn here")
    for i, view in enumerate(views):
        view.scroll_into_view_if_needed()
        if not move_a_control(view):
            problems.append(f"explorer {i}: moving its controls changed neither the plot nor the readout")
    if views:
        views[0].scroll_into_view_if_needed()
    page.screenshot(path=str(shot))
    shut_down_kernels(lab)
    return problems


def shut_down_kernels(lab) -> None:
    """End every kernel the server runs (each lesson's kernel would otherwise hold memory and CPU)."""
    with urllib.request.urlopen(lab.url("api/sessions")) as response:
        sessions = json.loads(response.read())
    for session in sessions:
        request = urllib.request.Request(lab.url(f"api/sessions/{session['id']}"), method="DELETE")
        urllib.request.urlopen(request).close()


@pytest.mark.parametrize("lesson", lessons_in_browser())
def test_student_version_runs_in_the_browser(page, lab, course, lesson, artifacts_dir):
    problems = check_notebook_in_browser(page, lab, f"student/{lesson}", artifacts_dir)
    assert not problems, "\n".join(problems)
    n_exercises = len(find_exercises(nbformat.read(course / lesson, as_version=4)))
    waiting = page.locator(".jp-OutputArea-output", has_text="not attempted yet").count()
    # a CUDA kernel exercise's check says, where no GPU answers, that it needs one (and calls nothing)
    elsewhere = page.locator(".jp-OutputArea-output", has_text="not graded here").count()
    assert waiting + elsewhere == n_exercises, (f"{n_exercises} exercises, {waiting} say 'not attempted yet' and "
                                                f"{elsewhere} that they need a CUDA GPU")


@pytest.mark.exhaustive
def test_start_page_runs_in_full_and_checks_pass(page, lab, artifacts_dir):
    problems = check_notebook_in_browser(page, lab, "00_start_here.ipynb", artifacts_dir)
    assert not problems, "\n".join(problems)
    assert page.locator(".jp-OutputArea-output", has_text="✓ tensor_bytes").count() == 1
    assert page.locator(".jp-OutputArea-output", has_text="backend: ").count() == 1


@pytest.mark.exhaustive
def test_a_missing_widget_frontend_is_caught(page, lab_server_factory, course, artifacts_dir):
    """Simulate a broken install: the ipywidgets JupyterLab extension disabled. The checks must notice."""

    def disable_widgets(tmp):
        write_settings(tmp / "settings")
        labconfig = tmp / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"@jupyter-widgets/jupyterlab-manager": True}}))

    with lab_server_factory(course, prepare=disable_widgets) as broken:
        open_notebook(page, broken.url("lab/tree/00_start_here.ipynb?reset"))
        run_all_cells(page)
        assert widget_problems(page), "widgets without their frontend went unnoticed"
        assert not explorers(page)
