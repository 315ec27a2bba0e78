"""Lesson 09's checks, proved: each reference passes on 50 seeds, each plausible wrong answer fails on all 50."""

import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises import fault_tolerance as checks
from mlsys_lab.exercises.fault_tolerance_failures import reference_diagnose, reference_replay_goodput
from mlsys_lab.exercises.fault_tolerance_resume import reference_train
from mlsys_lab.fault_tolerance.checkpoint_io import make_data, write_atomic, write_in_place
from mlsys_lab.fault_tolerance.reliability import expected_goodput, first_order_goodput, product_goodput
from mlsys_lab.fault_tolerance.resume import (
    CHECKPOINT_EVERY,
    CONFIG,
    fresh_state,
    from_bytes,
    save_checkpoint,
    train_step,
)

HOUR = 3600.0


@pytest.fixture(autouse=True)
def _scratch_in_memory(monkeypatch):
    """The kill-and-resume checks write and fsync hundreds of files per seed: on tmpfs an fsync costs nothing,
    and no verdict depends on the disk (the checks judge what the files hold when the kill comes)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")


# --- checkpoint_interval -------------------------------------------------------------------------------
def young(n, hours, c):
    return float(np.sqrt(2 * c * hours * HOUR / n))


def interval_example_only(n, hours, c):
    return young(n, hours, c) if (n, hours, c) == (16384, 50_000.0, 30.0) else young(1, hours, c)


# --- goodput ---------------------------------------------------------------------------------------------
def goodput_example_only(tau, c, r, m):
    return float(expected_goodput(tau, c, r, m)) if (tau, c, r, m) == (600.0, 30.0, 300.0, 3 * HOUR) else \
        float(product_goodput(tau, c, r, m))


# --- crash_safe_writer -----------------------------------------------------------------------------------
# Not here: the fsync mistakes (none at all, fsync before flush, no fsync of the folder, fsync after the rename).
# They lose data in a power cut only; after a process kill the files are the same, so no check can see them.
def write_temp(path, chunks, folder=None, keep_backup=False):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=folder or path.parent)
    with os.fdopen(fd, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    if keep_backup:
        path.with_name(path.name + ".bak").write_bytes(path.read_bytes())
    os.replace(tmp, path)
    sync_folder(path.parent)


def sync_folder(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def in_place_with_ceremony(path, chunks):  # fsyncs and "renames", but writes over the old file
    write_in_place(path, chunks)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(path, Path(path))
    sync_folder(Path(path).parent)


def buffered_in_place(path, chunks):  # no torn file at any kill between chunks: nothing is written until the end
    data = b"".join(chunks)
    Path(path).write_bytes(data)


def buffered_remove_then_rename(path, chunks):  # the Windows habit: os.rename will not replace, so remove first
    tmp = Path(path).with_name("ckpt.tmp")
    tmp.write_bytes(b"".join(chunks))
    os.remove(path)
    os.rename(tmp, path)


def remove_first(path, chunks):
    os.remove(path)
    write_temp(path, chunks)


def rename_before_close(path, chunks):  # the tail of the file is still in Python's buffer when it takes the name
    tmp = Path(path).with_name("ckpt.tmp")
    f = open(tmp, "wb")  # noqa: SIM115
    for chunk in chunks:
        f.write(chunk)
    os.replace(tmp, path)
    f.close()


def copy_onto(path, chunks):  # a copy writes into the checkpoint itself
    tmp = Path(path).with_name("ckpt.tmp")
    write_atomic(tmp, chunks)
    shutil.copyfile(tmp, path)
    tmp.unlink()


# --- resume_training -------------------------------------------------------------------------------------
def train_variant(folder, batches, order="number", verify="sha256", use_manifests=True, fallback=True,
                  skip=0, eager=False, final_save=True, resume=True):
    """The reference resume with one thing changed (see the catalogue's labels)."""
    folder = Path(folder)
    x, y = make_data(CONFIG)
    state = None
    if not resume:
        pass
    elif use_manifests:
        key = (lambda p: int(p.stem.split("_")[1])) if order == "number" else (lambda p: p.name)
        for manifest in sorted(folder.glob("ckpt_*.json"), key=key, reverse=True):
            try:
                meta = json.loads(manifest.read_text())
                data = (folder / meta["file"]).read_bytes()
            except (OSError, ValueError, KeyError, TypeError):
                if fallback:
                    continue
                break
            ok = {"sha256": len(data) == meta["n_bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"],
                  "size": len(data) == meta["n_bytes"], "none": True}[verify]
            if ok:
                state = from_bytes(data)
                break
            if not fallback:
                break
    else:  # the newest data file, whatever its manifest says
        files = sorted(folder.glob("ckpt_*.bin"), key=lambda p: int(p.stem.split("_")[1]), reverse=True)
        for path in files:
            try:
                state = from_bytes(path.read_bytes())
                break
            except Exception:
                continue
    state = state or fresh_state(CONFIG)
    saved = state["step"]
    if eager:
        batches = list(batches)
    for number, batch in enumerate(batches, start=1):
        if skip is not None and number <= state["step"] + skip:
            continue
        train_step(state, x, y, batch, CONFIG)
        if state["step"] % CHECKPOINT_EVERY == 0:
            save_checkpoint(folder, state)
            saved = state["step"]
    if final_save and state["step"] > saved:
        save_checkpoint(folder, state)


def train_saving_on_the_way_out(folder, batches):
    """Trains without periodic checkpoints and saves once, in a ``finally``, when the loop ends: a SIGKILL runs no
    ``finally``, and the check ignores what the job does after its kill point."""
    folder = Path(folder)
    x, y = make_data(CONFIG)
    state = fresh_state(CONFIG)
    manifests = sorted(folder.glob("ckpt_*.json"), key=lambda p: int(p.stem.split("_")[1]), reverse=True)
    for manifest in manifests:
        try:
            meta = json.loads(manifest.read_text())
            data = (folder / meta["file"]).read_bytes()
        except (OSError, ValueError, KeyError):
            continue
        if hashlib.sha256(data).hexdigest() == meta["sha256"]:
            state = from_bytes(data)
            break
    start = state["step"]
    try:
        for number, batch in enumerate(batches, start=1):
            if number > state["step"]:
                train_step(state, x, y, batch, CONFIG)
    finally:
        if state["step"] > start:
            save_checkpoint(folder, state)


# --- replay_goodput --------------------------------------------------------------------------------------
def replay_variant(times, work, tau, c, r, keep_on_checkpoint_failure=False, ignore_restart_failures=False,
                   restart_first=False, final_checkpoint=True, tie_lost=False, pad_last=False, keep_progress=False,
                   gaps=False):
    """The reference replay with one thing changed (see the catalogue's labels)."""
    times = np.sort(np.asarray(times, dtype=float))
    if gaps:
        times = np.cumsum(np.asarray(times, dtype=float))
    t, done, restarting = 0.0, 0.0, restart_first
    for failure in [*times, math.inf]:
        if restarting:
            if t + r > failure:
                if ignore_restart_failures:
                    continue
                t = failure
                continue
            t += r
            restarting = False
        while True:
            stretch = tau if pad_last else min(tau, work - done)
            last = done + stretch >= work
            end = t + stretch + (0.0 if last and not final_checkpoint else c)
            if end > failure or (tie_lost and end == failure):
                if (keep_on_checkpoint_failure and t + stretch <= failure) or keep_progress:
                    done += min(stretch, failure - t)
                break
            t, done = end, done + stretch
            if done >= work:
                return work / t
        if done >= work:
            return work / failure
        t, restarting = failure, True


def replay_first_order(times, work, tau, c, r):
    """No replay: Young's first-order goodput with the log's mean time between failures."""
    m = (times[-1] / len(times)) if len(times) else math.inf
    return 1 - c / tau - (tau / 2 + r) / m


# --- diagnose --------------------------------------------------------------------------------------------
def diagnose_variant(enter, leave, timeout, step_times=False, statistic=np.median, from_previous=False,
                     nan_only=False, at_deadline_late=False, from_last=False):
    """The reference diagnosis with one thing changed (see the catalogue's labels)."""
    enter, leave = np.asarray(enter, dtype=float), np.asarray(leave, dtype=float)
    hang_step, hung, detected = None, [], None
    for step in range(len(enter)):
        if np.isnan(enter[step]).all():
            break
        if from_previous:
            start = 0.0 if step == 0 else float(np.max(leave[step - 1]))
        elif from_last:
            start = float(np.nanmax(enter[step]))
        else:
            start = float(np.nanmin(enter[step]))
        deadline = start + timeout
        if nan_only:
            late = [int(r) for r in np.flatnonzero(np.isnan(enter[step]))]
        elif at_deadline_late:
            late = [int(r) for r in np.flatnonzero(~(enter[step] < deadline))]
        else:
            late = [int(r) for r in np.flatnonzero(~(enter[step] <= deadline))]
        if late:
            hang_step, hung, detected = step, late, deadline
            break
    done = len(enter) if hang_step is None else hang_step
    stragglers = []
    if done > 0:
        if step_times:
            durations = np.diff(np.vstack([np.zeros((1, enter.shape[1])), enter[:done]]), axis=0)
        else:
            durations = enter[:done] - np.vstack([np.zeros((1, enter.shape[1])), leave[:done - 1]])
        typical = statistic(durations, axis=0)
        stragglers = [int(r) for r in np.flatnonzero(typical > 1.15 * np.median(typical))]
    return {"hang_step": hang_step, "hung_ranks": hung, "detected_at": detected, "stragglers": stragglers}


def diagnose_last_to_arrive(enter, leave, timeout):
    """Straggler = the rank that enters last most often (in a healthy job, some rank always does)."""
    result = diagnose_variant(enter, leave, timeout)
    done = len(enter) if result["hang_step"] is None else result["hang_step"]
    if done == 0:
        return result
    last = np.argmax(np.asarray(enter[:done]), axis=1)
    counts = np.bincount(last, minlength=np.shape(enter)[1])
    result["stragglers"] = [int(np.argmax(counts))]
    return result


CATALOGUES = [
    Catalogue("checkpoint_interval", checks.check_checkpoint_interval, young, {
        "√(C·M): the factor 2 dropped": lambda n, h, c: young(n, h, c) / np.sqrt(2),
        "MTTF left in hours": lambda n, h, c: young(n, h / HOUR, c),
        "per-GPU MTTF, not the cluster's (n ignored)": lambda n, h, c: young(1, h, c),
        "Daly's first correction √(2CM) − C": lambda n, h, c: young(n, h, c) - c,
        "MTTF converted with 60 (minutes)": lambda n, h, c: young(n, h / 60, c),
        "right on the visible example only": interval_example_only,
    }),
    Catalogue("goodput", checks.check_goodput, expected_goodput, {
        "Young's first-order 1 − C/τ − (τ/2 + R)/M": lambda t, c, r, m: float(first_order_goodput(t, c, r, m)),
        "product form τ/(τ+C)·(1 − (τ/2+R)/M)": lambda t, c, r, m: float(product_goodput(t, c, r, m)),
        "restart ignored": lambda t, c, r, m: float(expected_goodput(t, c, 0.0, m)),
        "checkpoint not exposed to failures (C added outside the exponential)":
            lambda t, c, r, m: t / (m * np.exp(r / m) * np.expm1(t / m) + c),
        "restart added as a fraction, not in the exponent":
            lambda t, c, r, m: t / (m * np.expm1((t + c) / m)) - r / m,
        "right on the visible example only": goodput_example_only,
    }),
    Catalogue("crash_safe_writer", checks.check_crash_safe_writer, write_atomic, {
        "writes over the old file": write_in_place,
        "writes over the old file, then fsyncs and renames it onto itself": in_place_with_ceremony,
        "buffers every chunk, then writes over the old file at the end": buffered_in_place,
        "buffers every chunk, removes the old file, then renames the new one": buffered_remove_then_rename,
        "removes the old file first, then writes and renames": remove_first,
        "renames the temporary file before closing it": rename_before_close,
        "copies the temporary file onto the checkpoint": copy_onto,
        "temporary file in the system's temp folder": lambda p, c: write_temp(p, c, folder=tempfile.gettempdir()),
        "leaves a backup copy behind": lambda p, c: write_temp(p, c, keep_backup=True),
    }),
    Catalogue("resume_training", checks.check_resume_training, reference_train, {
        "never resumes: starts from step 0 after every kill": lambda f, b: train_variant(f, b, resume=False),
        "newest by file name as text (ckpt_5 sorts after ckpt_25)": lambda f, b: train_variant(f, b, order="name"),
        "trusts the manifest, never checks the data": lambda f, b: train_variant(f, b, verify="none"),
        "checks the data's size, not its checksum": lambda f, b: train_variant(f, b, verify="size"),
        "loads the newest data file, manifests ignored": lambda f, b: train_variant(f, b, use_manifests=False),
        "gives up at the first bad checkpoint and starts from step 0": lambda f, b: train_variant(f, b, fallback=False),
        "skips one batch too many on resume": lambda f, b: train_variant(f, b, skip=1),
        "restores the state but trains on every batch again": lambda f, b: train_variant(f, b, skip=None),
        "takes the whole loader at once (list(batches))": lambda f, b: train_variant(f, b, eager=True),
        "no checkpoint after the last step": lambda f, b: train_variant(f, b, final_save=False),
        "saves only on the way out (in a finally), never every 5 steps": train_saving_on_the_way_out,
    }),
    Catalogue("replay_goodput", checks.check_replay_goodput, reference_replay_goodput, {
        "a failure during a checkpoint keeps its stretch":
            lambda *a: replay_variant(*a, keep_on_checkpoint_failure=True),
        "a failure during a restart is ignored": lambda *a: replay_variant(*a, ignore_restart_failures=True),
        "a restart at the very start too": lambda *a: replay_variant(*a, restart_first=True),
        "no checkpoint after the last stretch": lambda *a: replay_variant(*a, final_checkpoint=False),
        "a checkpoint ending at the failure's moment is lost": lambda *a: replay_variant(*a, tie_lost=True),
        "the last stretch padded to a full interval": lambda *a: replay_variant(*a, pad_last=True),
        "work since the checkpoint kept (resumes where it failed)": lambda *a: replay_variant(*a, keep_progress=True),
        "failure times read as gaps between failures": lambda *a: replay_variant(*a, gaps=True),
        "no replay: Young's first-order formula with the log's MTTF": replay_first_order,
    }),
    Catalogue("diagnose", checks.check_diagnose, reference_diagnose, {
        "step time from consecutive entries (the same on every rank)":
            lambda *a: diagnose_variant(*a, step_times=True),
        "mean compute time, not the median (pauses flag healthy ranks)":
            lambda *a: diagnose_variant(*a, statistic=np.mean),
        "the worst single step, not the typical one": lambda *a: diagnose_variant(*a, statistic=np.max),
        "timeout counted from the previous step's end": lambda *a: diagnose_variant(*a, from_previous=True),
        "timeout counted from the last rank to enter": lambda *a: diagnose_variant(*a, from_last=True),
        "only ranks that never enter are hung": lambda *a: diagnose_variant(*a, nan_only=True),
        "a rank entering exactly at the timeout counted as hung":
            lambda *a: diagnose_variant(*a, at_deadline_late=True),
        "the straggler is the rank that enters last most often": diagnose_last_to_arrive,
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
