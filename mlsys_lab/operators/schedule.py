"""Macro scheduling (宏观调度) of a chain of dedicated units: serial vs pipelined.

A dedicated accelerator with one unit per operator type runs a chain of operators; one item (a batch)
visits every unit in turn. Serially, only one unit works at a time. Pipelined, unit i works on item j
while unit i+1 works on item j-1, so in steady state one item leaves every max(stage) seconds: the
slowest unit sets the pace and the others idle for the difference (their utilisation is stage/max).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.validation import check_int, check_positive


@dataclass(frozen=True)
class PipelineTimes:
    """Seconds to push ``n_items`` through the units, and each unit's busy fraction when pipelined."""

    serial_seconds: float
    pipelined_seconds: float
    utilisation: tuple[float, ...]

    @property
    def speedup(self) -> float:
        return self.serial_seconds / self.pipelined_seconds


def pipeline_times(stage_seconds: list[float] | tuple[float, ...], n_items: int) -> PipelineTimes:
    """serial = n·Σt; pipelined = Σt + (n - 1)·max t (fill, then one item per slowest stage)."""
    if not stage_seconds:
        raise ValueError("stage_seconds must list at least one stage time; got an empty list")
    stages = [check_positive("stage_seconds[i]", t) for t in stage_seconds]
    n = check_int("n_items", n_items, low=1)
    slowest = max(stages)
    pipelined = sum(stages) + (n - 1) * slowest
    busy = tuple(n * t / pipelined for t in stages)
    return PipelineTimes(n * sum(stages), pipelined, busy)
