"""How long does the capstone take on a laptop? Run lesson 12 as a learner does, cell by cell, and time it.

    python benchmarks/capstone_cpu.py                    # the lesson's default configuration, this machine
    python benchmarks/capstone_cpu.py --budget 180       # exit 1 when it took longer than 180 s

The notebook runs in a fresh kernel on a copy (the committed lesson is not touched), with a piece store of its own
(the course's pieces; a learner's own would cost the same), on this machine's CPUs. The lesson's promise is that
its default configuration (300 single-process Adam steps, data parallelism over 2 MPI ranks, a SIGKILL and a resume,
ZeRO-1) runs in 3 minutes or less on a 2-core laptop without a GPU. The script prints the total wall time, the
slowest cells and the machine, and writes them to ``--out`` (JSON) when asked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "12_capstone.ipynb"
BUDGET_S = 180.0  # the lesson's promise on a 2-core laptop


def timed_cells(path: Path, timeout_s: float) -> tuple[float, list[tuple[float, str]]]:
    """Execute the notebook at ``path`` in a fresh kernel: (total wall seconds, [(seconds, first line)] per cell)."""
    nb = nbformat.read(path, as_version=4)
    times: list[tuple[float, str]] = []
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}})
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            began = time.perf_counter()
            client.execute_cell(cell, index)
            first = next((line for line in cell.source.splitlines() if line and not line.startswith("#")), "")
            times.append((time.perf_counter() - began, f"[{index}] {first[:70]}"))
    return time.perf_counter() - start, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds the lesson may take (default 180)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one cell may take")
    parser.add_argument("--out", type=Path, help="write the timings to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlsys_lab_capstone_") as folder:
        os.environ["MLSYS_LAB_PIECES"] = str(Path(folder) / "pieces")  # the kernel inherits it: a fresh store
        total, cells = timed_cells(LESSON, args.timeout)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = f"{platform.processor() or platform.machine()}, {cores} cores, {platform.system()} {platform.release()}"
    print(f"lesson 12 on {machine}: {total:.0f} s in all (budget {args.budget:.0f} s)")
    for seconds, label in sorted(cells, reverse=True)[:6]:
        print(f"  {seconds:6.1f} s  {label}")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"), "total_s": total,
                                        "budget_s": args.budget, "cells": [{"s": s, "cell": c} for s, c in cells]},
                                       indent=1))
    return 0 if total <= args.budget else 1


if __name__ == "__main__":
    raise SystemExit(main())
