"""Re-execute notebooks in place and store their outputs (``make execute``).

Runs each notebook top to bottom in a fresh kernel of the current Python, with the working
directory set to the notebook's folder, and writes it back with its outputs. A cell that raises
stops that notebook and the command exits non-zero, naming the notebook and the cell.

    python -m mlsys_lab.course.execute notebooks/               # every lesson
    python -m mlsys_lab.course.execute notebooks/03_roofline.ipynb
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from tqdm.auto import tqdm

KERNEL_NAME = "python3"


def notebook_paths(target: Path) -> list[Path]:
    """The ``.ipynb`` files at ``target`` (a file or a folder), sorted, checkpoints skipped."""
    if target.is_file():
        return [target]
    if not target.is_dir():
        raise FileNotFoundError(f"no notebook or folder at {target}")
    return sorted(p for p in target.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def execute_notebook(path: Path, timeout_s: int = 900) -> nbformat.NotebookNode:
    """Execute one notebook in place; returns the executed notebook."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name=KERNEL_NAME,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.execute()
    nbformat.write(nb, path)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=["notebooks"], type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    os.environ.setdefault("MLSYS_LAB_PIECES", "off")  # the solved lessons' checks are no learner's pieces
    paths = [p for target in args.targets for p in notebook_paths(target)]
    failed = []
    for path in tqdm(paths, desc="executing", unit="notebook"):
        try:
            execute_notebook(path, args.timeout)
        except CellExecutionError as exc:
            failed.append(path)
            print(f"\n{path}: a cell raised\n{str(exc)[-2000:]}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
