"""Grader faults on demand, for tests/course/test_grade_states.py: a pytest plugin for the grading subprocess.

The test loads it with ``PYTEST_ADDOPTS="-p grader_faults"`` (and this folder on ``PYTHONPATH``); the faults
it plays are named in ``MLSYS_LAB_TEST_FAULTS`` (comma-separated):

- ``check_raises``: ``check_tensor_bytes`` raises ``MemoryError`` in the grading process (a bug or no memory
  there: the grader's failure, never the learner's);
- ``kernel_start``: no worker kernel starts (what "died at start-up 3 times" reports);
- ``pytest_dies``: the pytest process exits abruptly when the ``add_intensity`` segment begins.
"""

from __future__ import annotations

import os

import pytest

FAULTS = set(filter(None, os.environ.get("MLSYS_LAB_TEST_FAULTS", "").split(",")))


def pytest_configure(config: pytest.Config) -> None:
    if "check_raises" in FAULTS:
        from mlsys_lab.exercises import start_here

        def check_tensor_bytes(fn) -> None:
            raise MemoryError("the grading process ran out of memory (simulated)")

        start_here.check_tensor_bytes = check_tensor_bytes
    if "kernel_start" in FAULTS:
        from mlsys_lab.course import nbval_report

        def refuse(*args, **kwargs):
            raise RuntimeError("the grading kernel died at start-up 3 times in a row (simulated)")

        nbval_report._start_worker = refuse


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from mlsys_lab.course.nbval_report import SEGMENT_KEY

    cell = getattr(item, "cell", None)
    if "pytest_dies" in FAULTS and cell is not None and cell.metadata.get(SEGMENT_KEY) == "add_intensity":
        os._exit(70)
