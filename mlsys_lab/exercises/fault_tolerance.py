"""Checks for the exercises of 09_fault_tolerance.

The resume check is in :mod:`.fault_tolerance_resume`, the replay and detection checks in
:mod:`.fault_tolerance_failures`; all are re-exported here, where the notebook and the grader find them. The two
kill-and-resume checks kill the learner's code with a simulated SIGKILL that the check observes from its own side
(:mod:`.fault_tolerance_kill`): they judge the files a kill leaves, never what the learner's process reports.
Durability against a power cut (the ``fsync`` calls the lesson teaches) leaves no trace in the files after a
process kill, so no check grades it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.exercises.fault_tolerance_failures import check_diagnose, check_replay_goodput  # noqa: F401
from mlsys_lab.exercises.fault_tolerance_kill import (
    FolderEvents,
    KillingStream,
    name_changes,
    open_folder,
    run_until_killed,
    snapshot,
    write_new_file,
)
from mlsys_lab.exercises.fault_tolerance_resume import check_resume_training  # noqa: F401
from mlsys_lab.fault_tolerance.checkpoint_io import chunks_of
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
# What the check observes, all from its own process (see :mod:`.fault_tolerance_kill`): the folder at the kill
# point (the writer's chunks come from a KillingStream, which records the folder and raises SimulatedKill where a
# SIGKILL would land while the writer waits for a chunk); the inode number the checkpoint has at the end (a new
# file took the name, or the old one was rewritten in place); and, on Linux, the folder's inotify events (the
# checkpoint's name may change only by one rename onto it from the same folder). What it cannot observe: fsync.
# A SIGKILL loses nothing the process wrote (the page cache survives it); an fsync only matters for a power cut,
# which no file system state after a kill shows, so the text teaches it and the check does not grade it.
TARGET = "ckpt.bin"


def _writer_case(fn: Callable, old: bytes, new: bytes, chunk_bytes: int, kill_before: int | None) -> str:
    """One case in a fresh folder holding ``old`` at ckpt.bin: 'ok' or what went wrong."""
    with tempfile.TemporaryDirectory(dir=getattr(fn, "scratch_dir", None)) as name:
        folder = open_folder(name)  # every look at the folder goes through this descriptor, never a name
        old_inode = write_new_file(folder, TARGET, old)
        held = os.open(TARGET, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)  # its inode number stays taken
        try:
            with FolderEvents(name) as events:
                chunks = chunks_of(new, chunk_bytes)
                stream = KillingStream(chunks, kill_before, lambda: (snapshot(folder), events.read()))
                run_until_killed(fn, (Path(name) / TARGET, stream), stream)
                files, seen = stream.observed if stream.killed else (snapshot(folder), events.read())
        finally:
            os.close(held)
            os.close(folder)
    return _writer_verdict(files, seen, old, new, old_inode, len(chunks), kill_before)


def _writer_verdict(files: dict, seen: list, old: bytes, new: bytes, old_inode: int, n_chunks: int,
                    kill_before: int | None) -> str:
    target = files.get(TARGET)
    content = target.content if target is not None and target.kind == "file" else None
    if kill_before is not None:
        when = (f"SIGKILL while the writer waited for chunk {kill_before + 1} of {n_chunks}" if kill_before < n_chunks
                else f"SIGKILL after the last of {n_chunks} chunks, before the writer learned the data had ended")
        if content not in (old, new):
            found = ("missing" if target is None else "not a regular file" if content is None
                     else f"{len(content)} bytes, neither the old {len(old)} nor the new {len(new)}: torn")
            return f"{when}: the checkpoint was {found}"
        change = name_changes(seen, TARGET)
        return f"before the {when}, the checkpoint changed: {change}" if change else "ok"
    if content != new:
        return f"after a complete write the checkpoint holds {'nothing' if content is None else len(content)} " \
               f"bytes, not the {len(new)} written"
    change = name_changes(seen, TARGET)
    if change:
        return f"during the write the checkpoint changed other than by one rename onto it: {change}"
    if target.inode == old_inode:
        return ("the checkpoint is still the old file (the same inode), rewritten in place: a SIGKILL during the "
                "rewrite tears it. Write a new file beside it, then os.replace it onto the checkpoint")
    leftovers = sorted(name for name in files if name != TARGET)
    if leftovers:
        return f"files left behind after a complete write: {leftovers}"
    return "ok"


def check_crash_safe_writer(fn: Callable) -> None:
    """``fn(path, chunks)`` writes the byte chunks to ``path`` so that a kill at any moment leaves the old complete
    file or the new one. The chunks come from a stream that the check stops where a SIGKILL would land (between two
    chunks, or after the last), recording the folder as a killed process leaves it: the file is judged from that
    record; after a complete write, the checkpoint must be a new file with the new bytes and nothing left behind."""
    if os.name != "posix":
        print("… crash_safe_writer: this check needs Linux, macOS or WSL (it reads folders as POSIX does)")
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
    # judged in check_result; the learner's fn, not the runner, is kept as their piece
    check("crash_safe_writer", _writer_case, cases, compare=lambda got, expected: True, learner=fn)
