"""Links between lessons: a "previous · course map · next" line at the top and the bottom of each notebook.

    python -m mlsys_lab.course.navigation notebooks/

The navigation cells are markdown cells marked ``metadata.mlsys_lab.role = "navigation"``; running the
command again replaces them, so adding or renaming a lesson is one command. Markdown cells have no outputs,
so the notebooks need no re-execution afterwards.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROLE = "navigation"


def lesson_title(path: Path) -> str:
    """The notebook's first markdown heading without the '#' (e.g. '03 · Roofline and Little's law')."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def navigation_markdown(paths: list[Path], index: int) -> str:
    """The link line for lesson ``index`` of ``paths`` (relative links: they work in JupyterLab and on GitHub)."""
    parts = []
    if index > 0:
        parts.append(f"← [{lesson_title(paths[index - 1])}]({paths[index - 1].name})")
    parts.append(f"[course map]({paths[0].name}#The-course-map)")
    if index < len(paths) - 1:
        parts.append(f"[{lesson_title(paths[index + 1])}]({paths[index + 1].name}) →")
    return " · ".join(parts)


def is_navigation(cell) -> bool:
    return cell.get("metadata", {}).get("mlsys_lab", {}).get("role") == ROLE


def add_navigation(folder: Path) -> list[Path]:
    """Put a navigation line after the title cell and at the end of every lesson in ``folder``."""
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    for index, path in enumerate(paths):
        nb = nbformat.read(path, as_version=4)
        nb.cells = [c for c in nb.cells if not is_navigation(c)]
        text = navigation_markdown(paths, index)
        metadata = {"mlsys_lab": {"role": ROLE}}
        top, bottom = (nbformat.v4.new_markdown_cell(text, id=f"navigation-{where}", metadata=metadata)
                       for where in ("top", "bottom"))  # fixed ids: re-running changes nothing
        nb.cells = [nb.cells[0], top, *nb.cells[1:], bottom]
        nbformat.write(nb, path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="notebooks", type=Path)
    args = parser.parse_args(argv)
    paths = add_navigation(args.folder)
    print(f"navigation written into {len(paths)} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
