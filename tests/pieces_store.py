"""Where the checks a test run passes keep their pieces (``mlsys_lab.pieces``): never in the home of whoever runs
the tests, and a folder of its own for each notebook under nbval.

A passing check keeps the learner's function as a piece, and later lessons load it as "yours". Under the tests the
functions that pass are the lessons' reference solutions, so two rules hold:

* the run keeps them in a temporary folder (``MLSYS_LAB_PIECES``), set here, at start-up, for every run, including
  one that collects only ``notebooks/`` (a ``conftest.py`` in ``tests/`` is not read then, and the lessons kept
  their pieces in ``~/.mlsys_lab/pieces``, where the next run, and the developer's own lessons, loaded them);
* each notebook gets a folder of its own, set before its kernel starts (the first cell's setup). With one folder
  for the run, a lesson running beside the capstone (xdist) can keep a piece while the capstone runs: its MPI
  ranks, which look their pieces up when they start, then run that lesson's solution where the capstone's own
  process ran the course's, and its bit-for-bit comparisons fail (two did in a GPU-lane run with lessons 06, 08
  and 09 beside it; lesson 06 keeps its CUDA loss only on a GPU). The committed outputs were made with no pieces
  at all (``course/execute.py``).

Loaded for every run through ``-p pieces_store`` in ``pyproject.toml``. A test that needs a store of its own sets
``MLSYS_LAB_PIECES`` itself (``monkeypatch.setenv``).
"""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("MLSYS_LAB_PIECES", tempfile.mkdtemp(prefix="mlsys_lab_pieces_"))
_NOTEBOOK_FOLDERS: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if type(item).__name__ == "IPyNbCell":  # nbval's item: one cell of a notebook
        notebook = str(item.path)
        if notebook not in _NOTEBOOK_FOLDERS:
            _NOTEBOOK_FOLDERS[notebook] = tempfile.mkdtemp(prefix="mlsys_lab_pieces_")
        os.environ["MLSYS_LAB_PIECES"] = _NOTEBOOK_FOLDERS[notebook]
