"""The instructor's command line: ``mlsys-lab student``, ``mlsys-lab release`` and ``mlsys-lab grade``.

    mlsys-lab student notebooks/ notebooks/student/           # hand out: student versions
    mlsys-lab release ../class-release --lessons 00 03        # a graded class: handouts, library, no answer keys
    mlsys-lab grade submissions/*.ipynb --reference notebooks/00_start_here.ipynb \\
        --csv grades.csv --timeout 30                          # collect and grade

``mlsys-lab grade`` exits with 0 when every exercise was graded, 2 on bad arguments or reference, and 3 when some
exercise was *not graded* (a grader error, ``?`` in the table): those are no zeros, grade them again once fixed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from mlsys_lab.course.execute import notebook_paths
from mlsys_lab.course.grade import DEFAULT_CPU_SECONDS, DEFAULT_MEMORY_MB, SubmissionResult, default_jobs, grade
from mlsys_lab.course.release import grading_seed, write_release
from mlsys_lab.course.results import FAIL_STATUS, NOT_GRADED, PASS_STATUS
from mlsys_lab.course.self_test import check_confinement, self_test
from mlsys_lab.course.student import write_student_versions

NOT_GRADED_EXIT = 3  # ``mlsys-lab grade``'s status when an exercise was not graded (a grader error)
NOT_GRADED_CELL = "NG"  # the CSV's mark of an exercise not graded: no number, so no spreadsheet reads it as 0


def write_csv(results: list[SubmissionResult], path: Path) -> None:
    """The class table: one row per submission, the points of each exercise (1/0; 2/1/0 for a kernel exercise,
    whose second point is for speed; ``NG``: not graded, a grader error), score, max_score (the points at stake in
    the exercises graded), not_graded (how many were not), library answers used, and the performance figures of
    kernel exercises that passed."""
    names = list(results[0].exercises) if results else []
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", *names, "score", "max_score", "not_graded", "flags", "figures"])
        for r in results:
            marks = (NOT_GRADED_CELL if r.exercises[n].grader_error else r.exercises[n].points for n in names)
            flags = "; ".join(f"{n}: {r.exercises[n].flag}" for n in names if r.exercises[n].used)
            figures = "; ".join(f"{n}: {r.exercises[n].figure}" for n in names if r.exercises[n].figure)
            writer.writerow([r.submission, *marks, r.score, r.max_score, len(r.not_graded), flags, figures])


MARKS = {PASS_STATUS: "✓", FAIL_STATUS: "✗", NOT_GRADED: "?"}
SPEED_MARKS = {True: "+", False: "-"}  # after ✓, a kernel exercise's speed point: floor met (+) or missed (-)


def mark(result) -> str:
    """``✓``, ``✗`` or ``?``; a passed kernel exercise adds ``+`` (its speed floor met) or ``-`` (missed); ``!``
    when a library answer was used."""
    speed = SPEED_MARKS[bool(result.speed)] if result.passed and result.speed is not None else ""
    return MARKS[result.status] + speed + ("!" if result.used else "")


def format_table(results: list[SubmissionResult]) -> str:
    """A plain-text table (a :func:`mark` per exercise, the score in points of the exercises graded), then the
    reasons for every lost point, every exercise not graded and every flag."""
    if not results:
        return "no submissions"
    names = list(results[0].exercises)
    width = max(len("submission"), *(len(r.submission) for r in results))
    widths = [max(len(n), 1) for n in names]
    header = (n.ljust(w) for n, w in zip(names, widths, strict=True))
    lines = ["  ".join(["submission".ljust(width), *header, "score"])]
    for r in results:
        marks = (mark(r.exercises[n]).ljust(w) for n, w in zip(names, widths, strict=True))
        unknown = f" ({len(r.not_graded)} not graded)" if r.not_graded else ""
        lines.append("  ".join([r.submission.ljust(width), *marks, f"{r.score}/{r.max_score}{unknown}"]))
    failures = [f"  {r.submission} · {n}: {e.message}" for r in results for n, e in r.exercises.items()
                if e.status == FAIL_STATUS]
    failures += [f"  {r.submission} · {n}: the speed point (-): {e.figure or 'not timed'}" for r in results
                 for n, e in r.exercises.items() if e.passed and e.speed is False]
    if failures:
        lines += ["", "points lost:", *failures]
    unknown = [f"  {r.submission} · {n}: {e.message}" for r in results for n, e in r.exercises.items()
               if e.grader_error and not e.needs_elsewhere]
    if unknown:
        lines += ["", "not graded (?), the grader failed: not zeros, grade these again once fixed:", *unknown]
    elsewhere = sorted({f"  {n}: {e.message}" for r in results for n, e in r.exercises.items() if e.needs_elsewhere})
    if elsewhere:
        lines += ["", "not graded here (?): this machine cannot run them; grade again on one that can:", *elsewhere]
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

    release = commands.add_parser("release", help="write a class release: handouts and the library, no answer keys")
    release.add_argument("out", type=Path, help="a new (or empty) folder")
    release.add_argument("--seed", type=int, default=None, help="seed of the release's fixed cases (default: random)")
    release.add_argument("--lessons", nargs="+", metavar="LESSON", help="lessons handed out, by number or slug "
                         "(default: all), e.g. --lessons 00 03")
    release.add_argument("--source", type=Path, default=None, help="the course's source checkout (default: this one)")

    grader = commands.add_parser("grade", help="grade submissions against the reference notebook")
    grader.add_argument("submissions", nargs="*", type=Path, help="submitted notebooks or folders of them")
    grader.add_argument("--reference", type=Path, help="the instructor's executed notebook (required; with "
                        "--self-test, default: this checkout's notebooks/00_start_here.ipynb)")
    grader.add_argument("--self-test", action="store_true", help="grade the reference and its handout here and "
                        "report full marks / zero and which protections of the workers hold on this machine")
    grader.add_argument("--require-gpu", action="store_true",
                        help="exit with status 3 when an exercise that needs a CUDA GPU could not be graded here")
    grader.add_argument("--require-confinement", action="store_true",
                        help="refuse to grade unless every protection of the workers holds on this machine")
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
                        help=f"memory (heap and arrays) of a worker kernel, 0: none (default {DEFAULT_MEMORY_MB})")
    grader.add_argument("--keep", type=Path, metavar="DIR", help="keep the graded notebooks and logs in DIR")
    grader.add_argument("--seed-file", type=Path, metavar="FILE", help="the hidden cases of the seed in FILE "
                        "(written, random, when FILE does not exist; keep it private); default: fresh cases")

    args = parser.parse_args(argv)
    try:
        if args.command == "student":
            for path in write_student_versions(args.src, args.out):
                print(f"wrote {path}")
            return 0
        if args.command == "release":
            made = write_release(args.out, seed=args.seed, slugs=args.lessons, source=args.source)
            print("\n".join([f"wrote {made.out}", *made.report]))
            return 0
        if args.timeout <= 0:
            parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
        if args.jobs is not None and args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        if args.self_test:
            return _self_test(args)
        if args.reference is None or not args.submissions:
            parser.error("grade needs SUBMISSIONS and --reference (or --self-test)")
        may_grade, warning = check_confinement(args.require_confinement)
        if warning:
            print(f"mlsys-lab grade: {warning}", file=sys.stderr)
        if not may_grade:
            return 2
        with grading_seed(args.seed_file):
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
    return _not_graded_status(results, args.require_gpu)


def _self_test(args: argparse.Namespace) -> int:
    """``mlsys-lab grade --self-test``: 0 when this machine grades (and, with --require-confinement, safely)."""
    reference = args.reference or Path(__file__).resolve().parents[2] / "notebooks" / "00_start_here.ipynb"
    if not reference.is_file():
        raise FileNotFoundError(f"no reference notebook at {reference}: pass --reference")
    ok, report = self_test(reference, jobs=args.jobs)
    print(report)
    lacking = "NOT HELD" in report
    if args.require_confinement and lacking:
        print("mlsys-lab grade: some protections do not hold (--require-confinement)", file=sys.stderr)
        return 2
    return 0 if ok else 1


def _not_graded_status(results: list[SubmissionResult], require_gpu: bool = False) -> int:
    """0, or :data:`NOT_GRADED_EXIT` with a line on stderr when the grader failed to grade some exercise (or, with
    ``require_gpu``, when an exercise needed a GPU this machine lacks)."""
    here = sorted({name for r in results for name, e in r.exercises.items() if e.needs_elsewhere})
    if here:
        print(f"mlsys-lab grade: not graded here, this machine has no CUDA GPU: {', '.join(here)} (? in the table, "
              "NG in the CSV); grade them on a machine with one.", file=sys.stderr)
    missing = [(r.submission, name) for r in results for name, e in r.exercises.items()
               if e.grader_error and not e.needs_elsewhere]
    if not missing:
        return NOT_GRADED_EXIT if (here and require_gpu) else 0
    submissions = len({submission for submission, _ in missing})
    print(f"mlsys-lab grade: {len(missing)} exercise(s) of {submissions} submission(s) were NOT GRADED (grader "
          "error: ? in the table, NG in the CSV, \"not_graded\" in the JSON). An instructor must not record those "
          "as zeros: fix the cause given in each message and grade those submissions again.", file=sys.stderr)
    return NOT_GRADED_EXIT


if __name__ == "__main__":
    sys.exit(main())
