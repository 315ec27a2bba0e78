"""Do the worker's CPU and memory limits fail that exercise only, with a message that names the limit?"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course.grade import grade
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.course.student import student_version

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "00_start_here.ipynb"
CPU_HOG = ("import time\n\ndef tensor_bytes(shape, dtype):\n    start = time.process_time()\n"
           "    while time.process_time() - start < 30:\n        pass\n")
MEMORY_HOG = ("import numpy as np\n\ndef add_intensity(n, bytes_per_element):\n"
              "    return float(np.ones(400_000_000).sum())\n")

pytestmark = pytest.mark.slow


def test_cpu_and_memory_limits_fail_the_exercise_with_a_clear_message(tmp_path):
    reference = nbformat.read(LESSON, as_version=4)
    nb = student_version(reference)
    exercises = {e.name: e for e in find_exercises(reference)}
    nb.cells[exercises["tensor_bytes"].exercise_cell].source = CPU_HOG
    nb.cells[exercises["add_intensity"].exercise_cell].source = MEMORY_HOG
    nbformat.write(nb, tmp_path / "hog.ipynb")
    (result,) = grade([tmp_path / "hog.ipynb"], LESSON, timeout_s=25, jobs=1, cpu_seconds=2, memory_mb=1500)
    cpu, memory = result.exercises["tensor_bytes"], result.exercises["add_intensity"]
    assert not cpu.passed and "CPU time limit exceeded (2 s of CPU per exercise" in cpu.message, cpu.message
    assert not memory.passed and "MemoryError" in memory.message and "--memory-mb" in memory.message, memory.message
    assert not cpu.used and not memory.used
