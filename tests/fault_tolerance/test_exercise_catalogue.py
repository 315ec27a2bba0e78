"""Lesson 09's checks, proved: each reference passes on 50 seeds, each plausible wrong answer fails on all 50."""

import os
import tempfile
from pathlib import Path

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises import fault_tolerance as checks
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic, write_in_place
from mlsys_lab.fault_tolerance.reliability import expected_goodput, first_order_goodput, product_goodput

HOUR = 3600.0


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
def write_temp(path, chunks, flush=True, fsync_file=True, fsync_folder=True, folder=None, order="sync-first",
               keep_backup=False):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=folder or path.parent)
    with os.fdopen(fd, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        if flush:
            f.flush()
        if fsync_file and order == "sync-first":
            os.fsync(f.fileno())
        if order == "folder-first":
            os.fsync(f.fileno())
            sync_folder(path.parent)
        if order == "rename-first":
            os.replace(tmp, path)
            os.fsync(f.fileno())
    if keep_backup:
        path.with_name(path.name + ".bak").write_bytes(path.read_bytes())
    if order != "rename-first":
        os.replace(tmp, path)
    if fsync_folder and order != "folder-first":
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
        "temporary file and rename, no fsync at all":
            lambda p, c: write_temp(p, c, fsync_file=False, fsync_folder=False),
        "fsync without flushing the file object first": lambda p, c: write_temp(p, c, flush=False),
        "no fsync of the folder after the rename": lambda p, c: write_temp(p, c, fsync_folder=False),
        "fsync after the rename": lambda p, c: write_temp(p, c, order="rename-first"),
        "folder fsynced before the rename, not after": lambda p, c: write_temp(p, c, order="folder-first"),
        "temporary file in the system's temp folder": lambda p, c: write_temp(p, c, folder=tempfile.gettempdir()),
        "leaves a backup copy behind": lambda p, c: write_temp(p, c, keep_backup=True),
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
