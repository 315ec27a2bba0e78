"""Recorded measurements: the one loader of ``mlsys_lab/data/<name>.json``.

Lessons that are about a GPU show, on a machine without one, figures measured on a real GPU. Each
record is a JSON object written by a script in ``benchmarks/`` and carries where it was measured
(``device``, or ``gpu``/``cpu``) and when (``date``)::

    from mlsys_lab import records
    run = records.load("roofline_h200")        # a dict
    records.provenance(run)                    # 'NVIDIA H200, 2026-11-29'
"""

from __future__ import annotations

import json
from pathlib import Path

from mlsys_lab.validation import check_type

DATA_DIR = Path(__file__).resolve().parent / "data"


def names() -> list[str]:
    """The names of every record, without ``.json``."""
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def path(name: str) -> Path:
    """The file of record ``name`` (with or without ``.json``); ValueError listing the records if none."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a record name (str), got {type(name).__name__}")
    stem = name.removesuffix(".json")
    if stem not in names():
        raise ValueError(f"name must be one of the recorded measurements ({', '.join(names())}); got {name!r}")
    return DATA_DIR / f"{stem}.json"


def exists(name: str) -> bool:
    """Whether record ``name`` has been recorded (some are written only after a GPU run)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a record name (str), got {type(name).__name__}")
    return name.removesuffix(".json") in names()


def check_name(parameter: str, name) -> str:
    """``name`` as a record name for the argument ``parameter`` (e.g. ``measured_file``): TypeError for a non-str,
    ValueError listing the records for an unknown one, each naming ``parameter``."""
    if not isinstance(name, str):
        raise TypeError(f"{parameter} must be a record name (str); got {type(name).__name__}")
    if not exists(name):
        raise ValueError(f"{parameter} must be one of the recorded measurements ({', '.join(names())}); got {name!r}")
    return name


def load(name: str) -> dict:
    """The record ``name`` as a dict (see :func:`names`)."""
    return json.loads(path(name).read_text())


def provenance(record: dict) -> str:
    """Where and when a record was measured: ``'NVIDIA H200, 2026-11-29'`` (the keys it has, in that order)."""
    check_type("record", record, dict)
    where = record.get("device") or record.get("machine") or record.get("source") or "unknown device"
    when = record.get("date") or record.get("recorded") or "undated"
    return f"{where}, {when}"
