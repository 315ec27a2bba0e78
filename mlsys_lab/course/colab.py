"""Google Colab: an "Open in Colab" badge and a first code cell that sets the course up there.

    python -m mlsys_lab.course.colab notebooks/*.ipynb      # insert or update both, in place

The badge is the first line of the notebook's first markdown cell and opens the lesson's *handout*
(``notebooks/student/<name>``) on GitHub at the course's release tag. The setup cell is the first code cell,
marked ``metadata.mlsys_lab.role = "colab-setup"`` (and tagged ``colab-setup``) so that running the command
again replaces it; it is stored without outputs. On Colab (``google.colab`` imported, or ``COLAB_RELEASE_TAG``
set) the cell pip-installs the pinned runtime set (``binder/colab-requirements.txt``) and the course at the
same tag, and turns on the custom widget manager that ipywidgets 8 needs there; anywhere else it does nothing.
Markdown changes and an unexecuted cell need no re-execution of the notebook.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from mlsys_lab import __version__

# The one place of the repository's address: the README's Binder badge names the same one (a test checks).
GITHUB_REPOSITORY = "mlsys-lab/mlsys-lab"
RELEASE_TAG = f"v{__version__}"  # what Colab installs and opens: code and handouts of one release
REQUIREMENTS_PATH = "binder/colab-requirements.txt"
HANDOUT_FOLDER = "notebooks/student"
ROLE = "colab-setup"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\(" + re.escape(BADGE_IMAGE) + r"\)\]\([^)]*\)[ \t]*$", re.MULTILINE)


def handout_path(notebook: str | Path) -> str:
    """The repository path of a lesson's handout: ``03_roofline.ipynb`` -> ``notebooks/student/03_roofline.ipynb``."""
    name = Path(notebook).name
    if not name.endswith(".ipynb"):
        raise ValueError(f"notebook must name an .ipynb file; got {str(notebook)!r}")
    return f"{HANDOUT_FOLDER}/{name}"


def colab_url(repo_path: str) -> str:
    """Colab's address of a file of the repository at the release tag."""
    return f"https://colab.research.google.com/github/{GITHUB_REPOSITORY}/blob/{RELEASE_TAG}/{repo_path}"


def badge_markdown(notebook: str | Path) -> str:
    """``[![Open In Colab](…badge.svg)](…/notebooks/student/<name>)``: opens the lesson's handout on Colab."""
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(handout_path(notebook))})"


def setup_cell_source() -> str:
    """The first code cell of every lesson: installs the course on Colab, does nothing elsewhere.

    It prints one line on Colab, which also asks for a restart when the session had already imported an
    older NumPy than the pinned one (a running kernel keeps the module it imported).
    """
    return "\n".join([
        "# On Google Colab: install the course (pinned) and turn on its widgets. Anywhere else: nothing.",
        "import os, sys",
        'if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:',
        "    import subprocess",
        "    from importlib.metadata import version",
        f'    repo, tag = "{GITHUB_REPOSITORY}", "{RELEASE_TAG}"',
        '    pip = [sys.executable, "-m", "pip", "install", "-q"]',
        f'    subprocess.run(pip + ["-r", f"https://raw.githubusercontent.com/{{repo}}/{{tag}}/{REQUIREMENTS_PATH}"], '
        "check=True)",
        '    subprocess.run(pip + ["--no-deps", f"git+https://github.com/{repo}@{tag}"], check=True)',
        "    from google.colab import output",
        "    output.enable_custom_widget_manager()  # ipywidgets 8 draws on Colab only through this",
        '    stale = "numpy" in sys.modules and sys.modules["numpy"].__version__ != version("numpy")',
        '    print(f"mlsys-lab {tag} installed, widgets on" + ("; restart the session (new NumPy)" if stale else ""))',
    ])


def is_setup_cell(cell) -> bool:
    return cell.get("metadata", {}).get("mlsys_lab", {}).get("role") == ROLE


def add_badge(nb: NotebookNode, notebook: str | Path) -> None:
    """Make the badge the first line of the first markdown cell (replacing a badge already there)."""
    first = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if first is None:
        raise ValueError(f"{notebook}: no markdown cell to carry the Colab badge")
    body = BADGE_LINE.sub("", first.source).lstrip("\n")
    first.source = f"{badge_markdown(notebook)}\n\n{body}"


def add_setup_cell(nb: NotebookNode) -> None:
    """Put the setup cell just before the first other code cell (replacing an earlier setup cell; a re-executed
    notebook keeps the cell's execution count, so that running this again after ``make execute`` changes nothing)."""
    earlier = [c for c in nb.cells if is_setup_cell(c)]
    nb.cells = [c for c in nb.cells if not is_setup_cell(c)]
    cell = nbformat.v4.new_code_cell(setup_cell_source(), id=ROLE,  # a fixed id: re-running changes nothing
                                     metadata={"mlsys_lab": {"role": ROLE}, "tags": [ROLE]})
    if earlier and earlier[0].source == cell.source:
        cell.execution_count = earlier[0].get("execution_count")
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)


def add_colab_cells(path: Path) -> bool:
    """Insert or update the badge and the setup cell of the notebook at ``path``; True when the file changed."""
    path = Path(path)
    before = path.read_text(encoding="utf-8")
    nb = nbformat.reads(before, as_version=4)
    add_badge(nb, path)
    add_setup_cell(nb)
    after = nbformat.writes(nb)
    after += "" if after.endswith("\n") else "\n"
    if after != before:
        path.write_text(after, encoding="utf-8")
    return after != before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="course notebooks (.ipynb) to edit in place")
    args = parser.parse_args(argv)
    missing = [p for p in args.notebooks if p.suffix != ".ipynb" or not p.is_file()]
    if missing:
        print(f"colab: not a notebook file: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    changed = [p for p in args.notebooks if add_colab_cells(p)]
    print(f"Colab badge and setup cell: {len(changed)} of {len(args.notebooks)} notebooks changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
