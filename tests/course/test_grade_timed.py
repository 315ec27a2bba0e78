"""Grading a timed exercise (lesson 02's ``atb_tiled``): is the speed-up measured by the grader, from outside?

The learner's numba nest must compile in the confined worker, and its CPU time must be read from the worker
process by the grading process (never the transfer of the arrays, never a number the learner reports).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course.grade import grade
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.course.student import student_version
from mlsys_lab.exercises.loops import SPEEDUP_REQUIRED

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "02_loops.ipynb"

pytestmark = pytest.mark.slow

# Correct bit for bit (k innermost, increasing k), compiled by numba, but the naive order: no faster.
NAIVE_NJIT = '''from numba import njit

@njit
def atb_tiled(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    for i in range(n):
        for j in range(p):
            total = 0.0
            for k in range(m):
                total += a[k, i] * b[k, j]
            out[i, j] = total
    return out
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The reference's atb_tiled and the naive nest, each alone in a handout, graded in one run."""
    root = tmp_path_factory.mktemp("timed")
    reference_path = root / LESSON.name
    shutil.copy(LESSON, reference_path)
    reference = nbformat.read(reference_path, as_version=4)
    cell = next(e for e in find_exercises(reference) if e.name == "atb_tiled").exercise_cell
    paths = {}
    for name, source in (("solved", reference.cells[cell].source), ("naive", NAIVE_NJIT)):
        nb = student_version(reference)
        nb.cells[cell].source = source
        paths[name] = root / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    results = grade(list(paths.values()), reference_path, timeout_s=120, jobs=1)
    return {Path(r.submission).stem: r.exercises["atb_tiled"] for r in results}


def test_the_reference_nest_compiles_in_the_worker_and_is_fast_enough(graded):
    """Does numba JIT under the worker's guards, and does the speed-up reach the figure?"""
    solved = graded["solved"]
    assert solved.passed, solved.message
    assert solved.message.startswith("✓ atb_tiled:")
    speedup = float(solved.figure.split("x faster")[0])
    assert speedup >= SPEEDUP_REQUIRED, solved.figure


def test_the_naive_nest_is_correct_but_fails_on_speed(graded):
    """Is a correct but slow nest failed on the timed case, with the speed-up it reached named?"""
    naive = graded["naive"]
    assert not naive.passed
    assert "timed" in naive.message and "faster than the naive nest timed with it" in naive.message, naive.message
    assert f"needs {SPEEDUP_REQUIRED:g}x" in naive.message
    measured = float(naive.message.split("only ")[1].split("x faster")[0])
    assert measured < SPEEDUP_REQUIRED


def test_the_audit_hook_lets_only_numbas_own_libraries_through(monkeypatch):
    """Which ctypes events pass the armed hook: llvmlite's library and its symbols, nothing else."""
    import ctypes
    import os

    import llvmlite.binding.ffi as ffi

    from mlsys_lab.course import worker

    monkeypatch.setattr(worker, "_jit_folders", worker.jit_folders())
    llvm = ffi.lib._lib  # the CDLL llvmlite opened: what numba's JIT looks symbols up in
    allowed = worker._native_code_allowed
    assert allowed("ctypes.dlopen", (llvm._name,))
    assert allowed("ctypes.dlsym", (llvm, "LLVMPY_GetVersionInfo"))
    assert allowed("ctypes.dlsym", (ctypes.pythonapi, "_Py_HashSecret"))
    assert not allowed("ctypes.dlopen", ("libc.so.6",))
    assert not allowed("ctypes.dlopen", (None,))
    assert not allowed("ctypes.dlopen", (os.path.join(worker._jit_folders[0], "..", "numpy", "x.so"),))
    assert not allowed("ctypes.dlsym", (ctypes.pythonapi, "PyRun_SimpleString"))
    assert not allowed("ctypes.dlsym/handle", (0, "system"))
    assert not allowed("ctypes.call_function", (0, ()))


def test_the_grader_reads_a_processs_cpu_clock_from_outside():
    """Does :func:`process_cpu_seconds` see another process's busy CPU time, and not its sleep?"""
    import subprocess
    import sys
    import time

    from mlsys_lab.course.checks import process_cpu_seconds

    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(0.5)\n"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        time.sleep(0.05)
        start = process_cpu_seconds(child.pid)
        time.sleep(1.0)  # the child burns 0.3 s of CPU, then sleeps
        used = process_cpu_seconds(child.pid) - start
    finally:
        child.wait()
    assert 0.1 < used < 0.45
