"""Fixtures of the capstone's tests: a pieces folder of the test's own (MPI ranks inherit it), and the learner's
solved cells of earlier lessons defined as IPython defines a cell's functions (so a passing check keeps them)."""

from __future__ import annotations

import linecache
from pathlib import Path

import nbformat
import pytest

from mlsys_lab import pieces

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def piece_store(tmp_path, monkeypatch):
    """An empty pieces folder for this test: the course's pieces run until a check keeps one."""
    folder = tmp_path / "pieces"
    monkeypatch.setenv(pieces.STORE_ENV, str(folder))
    return folder


class LearnerCells:
    """A solved exercise cell of a lesson notebook, defined from a cell of its own after a setup cell."""

    def __init__(self) -> None:
        self.count = 0

    @staticmethod
    def source(notebook: str, function: str) -> str:
        nb = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)
        return next(c.source for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source
                    and "### BEGIN SOLUTION" in c.source)

    def define(self, source: str, function: str, setup: str = "import numpy as np\nimport os\n"):
        """``function`` from a cell holding ``source``; ``setup`` runs first as an earlier cell (the notebook's
        imports: the kept piece must bring the modules it reads along)."""
        self.count += 1
        namespace: dict = {}
        exec(compile(setup, f"/tmp/ipykernel_0/setup{self.count}.py", "exec"), namespace)
        filename = f"/tmp/ipykernel_0/{self.count:04d}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), namespace)
        return namespace[function]

    def solved(self, notebook: str, function: str):
        return self.define(self.source(notebook, function), function)


@pytest.fixture
def learner() -> LearnerCells:
    return LearnerCells()
