"""How long does grading a class take? Build 30 submissions of one lesson and grade them.

    python benchmarks/grade_30.py                       # 03_roofline (3 exercises), 30 submissions, one job per core
    python benchmarks/grade_30.py --reference notebooks/00_start_here.ipynb --n 60 --jobs 4

Every submission attempts every exercise (a solved, a wrong, a crashing or a forging answer in turn: the
forger prints ✓ lines and tries to reach the checks), so no exercise is short-cut as "not attempted" and
every one runs through nbval in a confined worker kernel, its check in the grading process. The
script checks the scores it gets against the ones it planted, then prints the wall-clock time and
the CPU time of all processes involved (grader, pytest, kernels): on a busy machine the wall-clock
time grows, while CPU seconds / cores is what an otherwise idle machine would need.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import nbformat

from mlsys_lab.course.grade import default_jobs, grade, load_reference
from mlsys_lab.course.notebook_cells import STUB_LINES
from mlsys_lab.course.student import student_version

ANSWERS = ("solved", "wrong", "raises", "forges")
FORGER = """try:
    import mlsys_lab.exercises
except ImportError:
    print("✓ all good")
"""


def answer(reference_source: str, stub: str, kind: str) -> str:
    """The exercise cell a learner of this kind would hand in."""
    if kind == "solved":
        return reference_source
    replacement = 'raise ValueError("not like this")' if kind == "raises" else "return None"
    return (FORGER if kind == "forges" else "") + stub.replace(STUB_LINES[1], replacement)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of every child it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=Path("notebooks/03_roofline.ipynb"))
    parser.add_argument("--n", type=int, default=30, help="number of submissions")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    reference = load_reference(args.reference)
    handout = student_version(reference.nb)
    expected = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for number in range(args.n):
            nb = nbformat.from_dict(handout)
            score = 0
            for position, ex in enumerate(reference.exercises):
                kind = ANSWERS[(number + position) % len(ANSWERS)]
                nb.cells[ex.exercise_cell].source = answer(
                    reference.nb.cells[ex.exercise_cell].source, reference.stub(ex), kind)
                score += kind == "solved"
            paths.append(Path(tmp) / f"learner_{number:02d}.ipynb")
            nbformat.write(nb, paths[-1])
            expected.append(score)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        results = grade(paths, args.reference, timeout_s=args.timeout, jobs=args.jobs, show_progress=True)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    got = [r.score for r in results]
    if got != expected:
        wrong = [f"{r.submission}: {[e.message for e in r.exercises.values()]}"
                 for r, want in zip(results, expected, strict=True) if r.score != want]
        raise SystemExit(f"scores differ from the planted answers: got {got}, expected {expected}\n"
                         + "\n".join(wrong))
    n_runs = args.n * len(reference.exercises)
    print(f"graded {args.n} submissions × {len(reference.exercises)} exercises of {args.reference.name} "
          f"({n_runs} graded exercises, {args.jobs} jobs) in {seconds:.1f} s: "
          f"{seconds / args.n:.2f} s per submission; scores as planted")
    print(f"CPU time of grader, pytest and kernels: {cpu:.1f} s ({cpu / args.jobs:.1f} s per job); "
          f"load average during the run: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
