"""Time a transformation: the same work before and after, as a ratio measured on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.timing import benchmark
from mlsys_lab.units import format_seconds


@dataclass(frozen=True)
class Comparison:
    """Median seconds before and after a transformation, and the speed-up before / after."""

    name: str
    before_s: float
    after_s: float

    @property
    def speedup(self) -> float:
        return self.before_s / self.after_s

    def __str__(self) -> str:
        before, after = format_seconds(self.before_s), format_seconds(self.after_s)
        return f"{self.name:28s} before {before:>9s}   after {after:>9s}   speed-up {self.speedup:5.2f}x"


def compare(name: str, before: Callable[[], object], after: Callable[[], object], repeat: int = 5,
            check: bool = True) -> Comparison:
    """Run both once (compiling them), check they agree, then time each (median of ``repeat``)."""
    if check:
        first, second = before(), after()
        if not np.allclose(np.asarray(first), np.asarray(second), rtol=1e-9, atol=1e-9):
            raise ValueError(f"{name}: before and after disagree; the transformation changed the result")
    return Comparison(name, benchmark(before, warmup=1, repeat=repeat).median,
                      benchmark(after, warmup=1, repeat=repeat).median)



