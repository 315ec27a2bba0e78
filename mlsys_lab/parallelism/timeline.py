"""Timelines: events on device streams, and how to read them (the notes' 性能诊断要点).

An :class:`Event` is one box of a profiler's timeline (what nsight systems or torch.profiler show
as a row per CUDA stream): a stream name, start and end seconds, a label and a kind. From a list of
events :func:`timeline_summary` reads the three things the notes ask about:

* **idle time**: when a stream has nothing to do (pipeline bubbles, waiting for data);
* **exposed communication**: communication time not hidden under computation, i.e. time in
  which a comm stream is busy and the compute stream is not;
* **over-synchronization**: visible as compute gaps that line up with collective calls.

What a collective costs is lesson 07's α-β model (:func:`mlsys_lab.collectives.cost.allreduce_time`).
:func:`timeline_raster` turns events into the image the lesson's figures and explorers show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.validation import check_finite, check_int, check_names, check_positive, check_sequence, check_type

FORWARD_RGB, BACKWARD_RGB, COMM_RGB = (0.27, 0.51, 0.71), (0.90, 0.49, 0.13), (0.58, 0.40, 0.74)


@dataclass(frozen=True)
class Event:
    """One box on a timeline: ``stream`` (e.g. "compute", "comm", "stage 2"), seconds, label, kind."""

    stream: str
    start: float
    end: float
    label: str
    kind: str  # "forward", "backward", "all_reduce", "send", ...
    microbatch: int = -1  # pipeline ops: which micro-batch and model chunk
    chunk: int = 0

    def __post_init__(self) -> None:  # cheap on the common path: a simulated schedule makes one per op
        for name in ("stream", "label", "kind"):
            if not isinstance(getattr(self, name), str):
                check_type(name, getattr(self, name), str)
        numbers = isinstance(self.start, (int, float)) and isinstance(self.end, (int, float))
        if not (numbers and math.isfinite(self.start) and math.isfinite(self.end) and self.end >= self.start):
            check_finite("start", self.start)
            if check_finite("end", self.end) < self.start:
                raise ValueError(f"end must be >= start={self.start:g}; got {self.end:g}")
        if type(self.microbatch) is not int or self.microbatch < -1:
            check_int("microbatch", self.microbatch, low=-1)  # -1: not a pipeline op
        if type(self.chunk) is not int or self.chunk < 0:
            check_int("chunk", self.chunk, low=0)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _check_events(events) -> None:
    check_type("events", events, (list, tuple))
    if not events or not all(isinstance(e, Event) for e in events):
        raise ValueError("events must be a non-empty list of Event")


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    total, current_end = 0.0, float("-inf")
    current_start = None
    for start, end in sorted(intervals):
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_start is not None:
        total += current_end - current_start
    return total


def _intersection_seconds(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return _union_seconds(a) + _union_seconds(b) - _union_seconds(a + b)


def timeline_summary(events: list[Event], compute_streams: tuple[str, ...] = ("compute",),
                     comm_streams: tuple[str, ...] = ("comm",)) -> dict[str, float]:
    """Total, busy, idle and exposed-communication seconds of a two-kind timeline.

    total = last end − first start; compute_busy = union of compute boxes; idle = total − busy;
    exposed_comm = comm time during which no compute box runs (what overlap failed to hide).
    """
    _check_events(events)
    for name, streams in (("compute_streams", compute_streams), ("comm_streams", comm_streams)):
        check_type(name, streams, (list, tuple, set, frozenset))
        check_names(name, sorted(streams, key=str) if isinstance(streams, (set, frozenset)) else streams)
    t0, t1 = min(e.start for e in events), max(e.end for e in events)
    compute = [(e.start, e.end) for e in events if e.stream in compute_streams]
    comms = [(e.start, e.end) for e in events if e.stream in comm_streams]
    busy = _union_seconds(compute)
    comm_total = _union_seconds(comms)
    hidden = _intersection_seconds(compute, comms)
    return {"total_s": t1 - t0, "compute_busy_s": busy, "compute_idle_s": (t1 - t0) - busy,
            "comm_s": comm_total, "exposed_comm_s": comm_total - hidden}


def stream_idle_fraction(events: list[Event]) -> float:
    """Fraction of (streams × makespan) in which a stream is idle (pipeline bubble fraction)."""
    _check_events(events)
    t0, t1 = min(e.start for e in events), max(e.end for e in events)
    streams = sorted({e.stream for e in events})
    busy = sum(_union_seconds([(e.start, e.end) for e in events if e.stream == s]) for s in streams)
    return 1.0 - busy / (len(streams) * (t1 - t0))


def timeline_raster(events: list[Event], streams: list[str], n_px: int = 600, t_end: float | None = None) -> np.ndarray:
    """An RGB image (len(streams), n_px, 3) of a timeline: forward blue, backward orange, anything else purple.

    Pixel column i covers [i, i+1)·t_end/n_px; a box spans at least one pixel and its last pixel is
    darker (×0.55), an edge between neighbours. Boxes alternate two shades (by their label) so that
    neighbouring micro-batches stay distinguishable. Empty time is white.
    """
    check_sequence("streams", streams, min_size=1)
    _check_events(events)
    missing = sorted({e.stream for e in events} - set(streams))
    if missing:
        raise ValueError(f"streams must name every event's stream; {missing} missing from {list(streams)!r:.80}")
    check_int("n_px", n_px, low=1, high=1 << 16)
    if t_end is not None:
        check_positive("t_end", t_end)
    _check_events(events)
    n_px = check_int("n_px", n_px, low=1)
    t_end = t_end or max(e.end for e in events)
    image = np.ones((len(streams), n_px, 3))
    for e in events:
        row = streams.index(e.stream)
        lo = int(round(e.start / t_end * n_px))
        hi = max(int(round(e.end / t_end * n_px)), lo + 1)
        base = {"forward": FORWARD_RGB, "backward": BACKWARD_RGB}.get(e.kind, COMM_RGB)
        shade = 0.78 if (sum(map(ord, e.label)) % 2) else 1.0
        image[row, lo:hi] = np.array(base) * shade
        image[row, max(lo, hi - 1):hi] = np.array(base) * 0.55  # a thin edge between boxes
    return image
