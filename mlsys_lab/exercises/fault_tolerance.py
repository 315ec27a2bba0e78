"""Checks for the exercises of 09_fault_tolerance.

The resume check is in :mod:`.fault_tolerance_resume`, the replay and detection checks in
:mod:`.fault_tolerance_build`; all are re-exported here, where the notebook and the grader find them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.exercises.fault_tolerance_build import check_diagnose, check_replay_goodput  # noqa: F401
from mlsys_lab.exercises.fault_tolerance_resume import check_resume_training  # noqa: F401
from mlsys_lab.fault_tolerance.checkpoint_io import chunks_of, write_atomic
from mlsys_lab.fault_tolerance.kill_resume import run_writer_killed
from mlsys_lab.fault_tolerance.reliability import expected_goodput
from mlsys_lab.units import DAY, HOUR


def reference_checkpoint_interval(n_gpus: int, gpu_mttf_hours: float, checkpoint_seconds: float) -> float:
    return float(np.sqrt(2 * checkpoint_seconds * gpu_mttf_hours * HOUR / n_gpus))


def check_checkpoint_interval(fn: Callable) -> None:
    """``fn(n_gpus, gpu_mttf_hours, checkpoint_seconds)`` -> Young's interval √(2·C·M_cluster), seconds."""
    cases = [Case("16,384 GPUs, 50,000 h, C=30 s", (16384, 50_000.0, 30.0),
                  expected=reference_checkpoint_interval(16384, 50_000.0, 30.0))]
    g = rng()
    for _ in range(10):
        n, hours, c = int(g.integers(8, 100_000)), float(g.uniform(1_000, 200_000)), float(g.uniform(1, 600))
        cases.append(Case(f"{n} GPUs, {hours:.0f} h, C={c:.1f} s", (n, hours, c),
                          expected=reference_checkpoint_interval(n, hours, c)))
    check("checkpoint_interval", fn, cases)


def check_goodput(fn: Callable) -> None:
    """``fn(interval, checkpoint_seconds, restart_seconds, mttf_seconds)`` -> exact goodput of the model."""
    cases = [Case("τ=600, C=30, R=300, M=3 h", (600.0, 30.0, 300.0, 3 * HOUR),
                  expected=float(expected_goodput(600.0, 30.0, 300.0, 3 * HOUR)))]
    g = rng()
    for _ in range(10):
        m = float(g.uniform(0.1, 5)) * DAY
        tau, c, r = (float(g.uniform(low, high)) * m for low, high in ((0.01, 1.0), (0.0005, 0.05), (0, 0.1)))
        cases.append(Case(f"τ={tau:.0f}, C={c:.0f}, R={r:.0f}, M={m:.0f}", (tau, c, r, m),
                          expected=float(expected_goodput(tau, c, r, m))))
    check("goodput", fn, cases)


# --- the crash-safe writer ---------------------------------------------------------------------------
def _run_writer(fn: Callable, path: Path, chunks: list[bytes], pause_after: int | None) -> list[str]:
    """Fork, run the writer, SIGKILL it once it pauses; the lines it reported (:func:`run_writer_killed`).

    In a graded run ``fn`` is the grader's proxy of the learner's function: the learner's worker does
    the fork (``fn.run_writer``) in its own folder, and this process inspects the file it leaves.
    """
    if hasattr(fn, "run_writer"):
        return fn.run_writer(path, chunks, pause_after)
    return run_writer_killed(fn, path, chunks, pause_after)


def _durability_problem(lines: list[str], path: Path, n_bytes: int) -> str | None:
    """The order a durable replace needs: fsync the temporary file once all its bytes are written, rename it
    onto the checkpoint (same folder), then fsync the folder so that the rename itself survives a power cut."""
    renames = [(i, line.split(" ", 2)) for i, line in enumerate(lines) if line.startswith("rename ")]
    if not renames:
        return "no os.replace/os.rename: the new file must appear under its name in one atomic step"
    at, (_, inode, where) = renames[-1]
    src_folder, dst = where.split("|", 1)
    if Path(dst) != path.resolve() or Path(src_folder) != path.resolve().parent:
        return "the temporary file must sit in the checkpoint's folder and be renamed onto the checkpoint"
    synced = [line.split() for line in lines[:at] if line.startswith(f"fsync file {inode} ")]
    if not synced:
        return "no os.fsync of the temporary file before the rename: after a power cut the name could point " \
               "at unwritten data"
    if int(synced[-1][3]) != n_bytes:
        return (f"the temporary file held {synced[-1][3]} of {n_bytes} bytes when it was fsynced: flush the "
                "file object (f.flush()) before os.fsync(f.fileno()), or the tail is still in Python's buffer")
    folder_inode = path.resolve().parent.stat().st_ino
    if f"fsync dir {folder_inode}" not in lines[at + 1:]:
        return "no os.fsync of the folder after the rename: the rename itself is not durable until the folder is"
    return None


def _writer_case(fn: Callable, old: bytes, new: bytes, chunk_bytes: int, pause_after: int | None) -> str:
    """One case in a fresh folder: 'ok' or what went wrong."""
    with tempfile.TemporaryDirectory(dir=getattr(fn, "scratch_dir", None)) as folder:
        path = Path(folder) / "ckpt.bin"
        write_atomic(path, [old])
        chunks = chunks_of(new, chunk_bytes)
        lines = _run_writer(fn, path, chunks, pause_after)
        if "todo" in lines:
            raise NotImplementedError
        problem = next((line for line in lines if line.startswith(("raised", "timed out"))), None)
        if problem:
            return problem
        content = path.read_bytes() if path.exists() else None
        if pause_after is not None:  # killed mid-write: the old checkpoint must be intact
            if content != old:
                found = "missing" if content is None else f"{len(content)} bytes, not the old {len(old)}"
                return f"killed after {pause_after} of {len(chunks)} chunks: the checkpoint was {found}"
            return "ok"
        if content != new:
            held = 0 if content is None else len(content)
            return f"after a complete write the file holds {held} bytes, not {len(new)}"
        problem = _durability_problem(lines, path, len(new))
        if problem:
            return problem
        leftovers = sorted(p.name for p in Path(folder).iterdir() if p.name != path.name)
        if leftovers:
            return f"files left behind after a complete write: {leftovers}"
        return "ok"


def check_crash_safe_writer(fn: Callable) -> None:
    """``fn(path, chunks)`` writes the byte chunks to ``path`` so that a kill at any moment leaves the
    old complete file or the new one. The grader forks, kills the writer mid-write with SIGKILL, and
    inspects the file (POSIX only)."""
    if not hasattr(os, "fork"):
        print("… crash_safe_writer: this check needs os.fork (Linux, macOS or WSL)")
        return
    g = rng()

    def case(new_bytes: int, chunk: int, pause: int | None) -> Case:
        old, new = g.bytes(int(g.integers(1_000, 50_000))), g.bytes(new_bytes)
        n_chunks = len(chunks_of(new, chunk))
        pause = None if pause is None else min(pause, n_chunks)
        label = (f"{len(new)} bytes in {n_chunks} chunks, "
                 + ("written to the end" if pause is None else f"SIGKILL after chunk {pause}"))
        return Case(label, (fn, old, new, chunk, pause), expected="ok",
                    check_result=lambda got: None if got == "ok" else str(got))  # the whole reason, not cut short

    cases = [
        case(3_000, 512, None),  # small chunks: all of it still in a file object's buffer unless flushed
        case(int(g.integers(20_000, 200_000)), int(g.integers(512, 16_384)), None),
        case(int(g.integers(1_000, 50_000)), 1_024, 0),  # killed before the first byte
        case(40_000, 4_096, 10),  # killed after the last chunk, before the writer could finish
    ]
    for index in range(4):
        new_bytes, chunk = int(g.integers(1_000, 200_000)), int(g.integers(512, 16_384))
        n_chunks = len(chunks_of(b"x" * new_bytes, chunk))
        cases.append(case(new_bytes, chunk, None if index == 0 else int(g.integers(1, n_chunks + 1))))
    check("crash_safe_writer", _writer_case, cases, compare=lambda got, expected: True)  # judged in check_result

