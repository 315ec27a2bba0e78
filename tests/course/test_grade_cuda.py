"""Graded on a GPU, in the confined worker: do the lessons' CUDA solutions pass with a performance figure, and do a
kernel that never ends and one that writes out of bounds each fail that exercise only, with a clear message?

The graded notebook holds the three CUDA exercises as the lessons have them (04's transpose, 01's bias + GELU,
03's reduction), each with a ``✓`` verdict stored under its check (the lesson notebooks, executed on a CPU, store
"needs a CUDA GPU" there). The faulty submission's transpose spins for ever (stopped by the cell time limit) and its
bias + GELU writes a gigabyte past its output (an illegal address: the worker's CUDA context is lost, so a fresh
worker grades the reduction, which must still pass). Runs only where a CUDA GPU answers; the protocol the grader
and the worker speak for a kernel exercise is tested on any machine.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from cuda_catalogue import needs_gpu

from mlsys_lab.course.grade import grade

ROOT = Path(__file__).resolve().parents[2]
LESSONS = (("04_memory_hierarchy", "transpose_cuda"), ("01_operators", "bias_gelu"), ("03_roofline", "reduce_sum"),
           ("11_moe", "moe_permute_cuda"), ("11_moe", "moe_unpermute_cuda"), ("04_memory_hierarchy", "bf16_mma_cuda"),
           ("04_memory_hierarchy", "softmax_rows_cuda"), ("04_memory_hierarchy", "sgemm_tiled_cuda"),
           ("06_training_memory", "softmax_xent_cuda"))
# The first architecture an exercise's kernel is written for, where it is not sm_75 (BF16 mma.sync needs sm_80).
MIN_ARCH = {"bf16_mma_cuda": 80}
SPIN = ("    __shared__ float tile[TILE][TILE + 1];",
        "    volatile const float* spin = a;\n    while (spin[0] != 12345.0f) {}  // never true: loops for ever\n"
        "    __shared__ float tile[TILE][TILE + 1];")
OUT_OF_BOUNDS = ("out[i] = scale * (0.5f", "out[i * 4096 + 1000000000LL] = scale * (0.5f")  # the code, not the comment



def graded_notebook(edits: dict[str, tuple[str, str]]) -> nbformat.NotebookNode:
    """The three exercise cells and their check cells, each check with a stored pass; ``edits`` per exercise."""
    nb = nbformat.v4.new_notebook()
    for lesson, name in LESSONS:
        cells = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4).cells
        index = next(i for i, c in enumerate(cells) if c.cell_type == "code" and f"def {name}(" in c.source)
        source = cells[index].source
        if name in edits:
            old, new = edits[name]
            assert source.count(old) == 1, old
            source = source.replace(old, new, 1)
        nb.cells.append(nbformat.v4.new_code_cell(source, execution_count=1))
        nb.cells.append(nbformat.v4.new_code_cell(cells[index + 1].source, execution_count=2, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text=f"✓ {name}: 1/1 cases\n")]))
    return nb


@needs_gpu
@pytest.mark.slow
def test_cuda_solutions_pass_and_faults_cost_one_exercise_each(tmp_path):
    nbformat.write(graded_notebook({}), tmp_path / "reference.ipynb")
    nbformat.write(graded_notebook({"transpose_cuda": SPIN, "bias_gelu": OUT_OF_BOUNDS}), tmp_path / "faulty.ipynb")
    reference, faulty = grade([tmp_path / "reference.ipynb", tmp_path / "faulty.ipynb"], tmp_path / "reference.ipynb",
                              timeout_s=20, jobs=1)
    for name, result in {**reference.exercises, **{f"faulty {k}": v for k, v in faulty.exercises.items()}}.items():
        print(f"{name}: {result.status}: {result.message} · {result.figure}")
    # every solution earns both points: correct, and at or above its speed floor
    assert reference.score == reference.max_score == 2 * len(LESSONS), {k: (v.message, v.figure)
                                                                         for k, v in reference.exercises.items()}
    assert all("/s, " in r.figure and "of the course's kernel" in r.figure for r in reference.exercises.values())
    spin, wild = faulty.exercises["transpose_cuda"], faulty.exercises["bias_gelu"]
    assert spin.status == "fail" and "timed out" in spin.message, spin.message
    assert wild.status == "fail" and "illegal memory access in your kernel" in wild.message, wild.message
    assert (spin.max_points, wild.max_points) == (2, 2)  # a hang or a crash loses the speed point too
    fine = [r for name, r in faulty.exercises.items() if name not in ("transpose_cuda", "bias_gelu")]
    assert all(r.passed for r in fine), [r.message for r in fine]


@pytest.mark.parametrize("n", [5, 2**24 + 3], ids=["small", "over the old 64 MiB message limit"])
def test_kernel_protocol_holds_times_and_returns_results(worker_serving, n):
    """Do ``gpu_call``, ``gpu_hold``, ``gpu_seconds`` and ``gpu_last`` answer as the in-process runner does, for the
    timed case's size too (a 2^24-float array is 89 MB of base64)?"""
    from mlsys_lab.course import wire

    calls = []
    proxy, thread = worker_serving(lambda x, s: calls.append(1) or x * np.float32(s))
    x = np.arange(n, dtype=np.float32)
    assert np.array_equal(proxy.gpu_call((x[:5], 2.0)), x[:5] * 2)
    proxy.gpu_hold((x, 3.0))
    seconds = proxy.gpu_seconds(4)
    assert seconds > 0 and len(calls) == 5
    assert np.array_equal(proxy.gpu_last(), x * 3)
    wire.send_message(proxy.sock, {"op": "done", "line": ""})
    thread.join(5)
    assert not thread.is_alive()


@pytest.mark.skipif(__import__("mlsys_lab.backend").backend.on_gpu, reason="a GPU answers here: the checks run")
def test_without_a_gpu_each_cuda_check_says_so_in_one_line_and_calls_nothing(capsys):
    """The line a CPU-executed lesson stores, and the Verdict a grader reads (``needs``: not graded, never failed)."""
    from mlsys_lab.course.checks import lessons
    from mlsys_lab.exercises import TODO, VERDICT_SINK

    def never(*args):
        raise AssertionError("the learner's function was called without a GPU")

    names = [name for _, name in LESSONS]
    slugs = {name: lesson.split("_", 1)[1] for lesson, name in LESSONS}
    verdicts = []
    token = VERDICT_SINK.set(verdicts.append)
    try:
        for name in names:
            assert getattr(lessons()[slugs[name]], f"check_{name}")(never) is None
    finally:
        VERDICT_SINK.reset(token)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(names) == len(verdicts) >= 8
    for name, line, verdict in zip(names, lines, verdicts, strict=True):
        needs = MIN_ARCH.get(name) and "a CUDA GPU of compute capability 8.0 or newer"
        assert line.startswith(f"… {name}: needs {needs or 'a CUDA GPU'}") and "not graded here" in line, line
        assert (verdict.status, verdict.n_cases) == (TODO, 0) and verdict.needs.startswith("a CUDA GPU"), verdict


def test_learner_compile_errors_name_the_learners_lines():
    """NVRTC's log as the learner reads it; the course's solution markers compile as blank lines; a stub body is
    'not attempted', before any GPU is asked for."""
    from mlsys_lab.kernels.learner import compile_errors, compile_learner_kernel, without_markers

    source = 'extern "C" __global__ void k(float* out) {\n    out[idx] = 1.0f;\n    out[0] = y;\n}'
    log = ('your_kernel.cu(2): error: identifier "idx" is undefined\nyour_kernel.cu(3): error: identifier "y" is '
           'undefined\n2 errors detected in the compilation of "your_kernel.cu".')
    assert compile_errors(log, source) == (
        'your kernel does not compile (2 errors):\n  line 2: error: identifier "idx" is undefined\n'
        '      out[idx] = 1.0f;\n  line 3: error: identifier "y" is undefined\n      out[0] = y;')
    assert compile_errors("something else", source).endswith("something else")
    marked = "a\n    ### BEGIN SOLUTION\n    b\n    ### END SOLUTION\nc"
    assert without_markers(marked) == "a\n\n    b\n\nc"
    with pytest.raises(NotImplementedError, match="still the stub"):
        compile_learner_kernel("void k() {\n    # YOUR CODE HERE\n    raise NotImplementedError()\n}", "k")


def test_lesson_solutions_compile_for_every_course_gpu(tmp_path):
    """Do the lessons' CUDA solutions (their source strings, markers blanked as the compile helper does) assemble
    for every GPU the course names, sm_75 (Colab's T4) to sm_90, as the course's own kernels must?"""
    import re
    import shutil
    import subprocess

    from mlsys_lab.kernels.learner import without_markers

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit to compile-check kernels")
    for lesson, name in LESSONS:
        first = MIN_ARCH.get(name, 75)
        archs = ",".join(f"sm_{a}" for a in (75, 80, 89, 90) if a >= first)
        cells = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4).cells
        cell = next(c.source for c in cells if c.cell_type == "code" and f"def {name}(" in c.source)
        source = re.search(r'_SOURCE = r"""\n(.*?)"""', cell, re.DOTALL).group(1)
        path = tmp_path / f"{name}.cu"
        path.write_text(without_markers(source))
        done = subprocess.run([nvcc, "-std=c++17", "--fatbin", "-gencode", f"arch=compute_{first},code=[{archs}]", "-o",
                               str(tmp_path / f"{name}.fatbin"), str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"{lesson}, {name}:\n{done.stderr}"
