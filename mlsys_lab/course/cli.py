"""The instructor's command line: ``mlsys-lab student`` and ``mlsys-lab grade``.

    mlsys-lab student notebooks/ notebooks/student/           # hand out: student versions
    mlsys-lab grade submissions/*.ipynb --reference notebooks/00_start_here.ipynb \\
        --csv grades.csv --timeout 30                          # collect and grade
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from mlsys_lab.course.execute import notebook_paths
from mlsys_lab.course.grade import DEFAULT_CPU_SECONDS, DEFAULT_MEMORY_MB, SubmissionResult, default_jobs, grade
from mlsys_lab.course.student import write_student_versions


def write_csv(results: list[SubmissionResult], path: Path) -> None:
    """The class table: one row per submission, 1/0 per exercise, score, max_score, library answers used, and
    the performance figures of kernel exercises that passed."""
    names = list(results[0].exercises) if results else []
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", *names, "score", "max_score", "flags", "figures"])
        for r in results:
            passed = (int(r.exercises[n].passed) for n in names)
            flags = "; ".join(f"{n}: {r.exercises[n].flag}" for n in names if r.exercises[n].used)
            figures = "; ".join(f"{n}: {r.exercises[n].figure}" for n in names if r.exercises[n].figure)
            writer.writerow([r.submission, *passed, r.score, r.max_score, flags, figures])


def format_table(results: list[SubmissionResult]) -> str:
    """A plain-text table (✓/✗ per exercise, ``!`` when a library answer was used, score), then the reasons
    for every lost point and every flag."""
    if not results:
        return "no submissions"
    names = list(results[0].exercises)
    width = max(len("submission"), *(len(r.submission) for r in results))
    widths = [max(len(n), 1) for n in names]
    header = (n.ljust(w) for n, w in zip(names, widths, strict=True))
    lines = ["  ".join(["submission".ljust(width), *header, "score"])]
    for r in results:
        marks = ((("✓" if r.exercises[n].passed else "✗") + ("!" if r.exercises[n].used else "")).ljust(w)
                 for n, w in zip(names, widths, strict=True))
        lines.append("  ".join([r.submission.ljust(width), *marks, f"{r.score}/{r.max_score}"]))
    failures = [f"  {r.submission} · {n}: {e.message}" for r in results for n, e in r.exercises.items()
                if not e.passed]
    if failures:
        lines += ["", "points lost:", *failures]
    flagged = [f"  {r.submission} · {n}: {e.flag}" for r in results for n, e in r.exercises.items() if e.used]
    if flagged:
        lines += ["", "library answers used (!):", *flagged]
    figures = [f"  {r.submission} · {n}: {e.figure}" for r in results for n, e in r.exercises.items() if e.figure]
    if figures:
        lines += ["", "performance of kernel exercises:", *figures]
    return "\n".join(lines)


def _submission_paths(targets: list[Path]) -> list[Path]:
    return [p for target in targets for p in notebook_paths(target)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlsys-lab", description="Instructor tools of the course.")
    commands = parser.add_subparsers(dest="command", required=True)

    student = commands.add_parser("student", help="write student versions (solutions replaced by stubs)")
    student.add_argument("src", type=Path, help="a course notebook or a folder of them")
    student.add_argument("out", type=Path, help="output folder (or .ipynb file when SRC is one notebook)")

    grader = commands.add_parser("grade", help="grade submissions against the reference notebook")
    grader.add_argument("submissions", nargs="+", type=Path, help="submitted notebooks or folders of them")
    grader.add_argument("--reference", required=True, type=Path, help="the instructor's executed notebook")
    grader.add_argument("--json", action="store_true", help="print one JSON object per submission")
    grader.add_argument("--csv", type=Path, metavar="FILE", help="write the class table to FILE")
    grader.add_argument("--json-file", type=Path, metavar="FILE",
                        help="write one JSON object per submission to FILE (JSON lines), beside the table")
    grader.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="seconds per cell (default 30)")
    grader.add_argument("--jobs", type=int, default=None, help=f"parallel kernels (default {default_jobs()})")
    grader.add_argument("--context", choices=["slice", "all"], default="slice",
                        help="cells run before each exercise: those it needs (slice) or all earlier ones")
    grader.add_argument("--cpu-seconds", type=float, default=DEFAULT_CPU_SECONDS, metavar="S",
                        help=f"CPU seconds per exercise in the worker, 0: none (default {DEFAULT_CPU_SECONDS:g})")
    grader.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB, metavar="MB",
                        help=f"address space of a worker kernel, 0: none (default {DEFAULT_MEMORY_MB})")
    grader.add_argument("--keep", type=Path, metavar="DIR", help="keep the graded notebooks and logs in DIR")

    args = parser.parse_args(argv)
    try:
        if args.command == "student":
            for path in write_student_versions(args.src, args.out):
                print(f"wrote {path}")
            return 0
        if args.timeout <= 0:
            parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
        if args.jobs is not None and args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        results = grade(_submission_paths(args.submissions), args.reference, timeout_s=args.timeout,
                        jobs=args.jobs, context=args.context, keep=args.keep, show_progress=not args.json,
                        cpu_seconds=args.cpu_seconds, memory_mb=args.memory_mb)
    except (ValueError, FileNotFoundError) as exc:
        print(f"mlsys-lab {args.command}: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # the grading machinery itself failed (pytest could not run)
        print(f"mlsys-lab {args.command}: {exc}", file=sys.stderr)
        return 1
    if args.csv:
        write_csv(results, args.csv)
    if args.json_file:
        args.json_file.write_text("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in results),
                                  encoding="utf-8")
    if args.json:
        for r in results:
            print(json.dumps(r.to_json(), ensure_ascii=False))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
