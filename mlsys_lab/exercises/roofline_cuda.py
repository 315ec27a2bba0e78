"""The CUDA exercise of 03_roofline: a full reduction, sum(x) of float32, checked and timed on the GPU.

``reduce_sum(x)`` is the learner's launcher: x a float32 device array of any length; it returns the sum as a
one-element float32 device array, computed in one kernel: a grid-stride loop per thread, warp shuffles, one
partial per warp in shared memory, and one ``atomicAdd`` per block. Float32 addition is not associative, so a
parallel sum depends on the order of its additions: the cases whose values are small integers have an exact
answer whatever the order (every partial sum stays below 2^24, where float32 holds every integer), so they must
come out exact, and a dropped or doubled element cannot hide; the large cases of random floats in [0, 1) must
come within 1e-4 of the float64 sum (a one-block-per-256-elements kernel's 131 072 atomics drift about 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.exercises import Case, rng
from mlsys_lab.exercises.cuda_kernels import KernelRace, TimedCase, check_kernel, float32_result, launcher, speed_point
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.roofline.reduce import sum_atomic, sum_reference

RTOL_RANDOM = 1e-4  # of the sum, for random floats in [0, 1)
FLOOR = 0.6  # of the course's kernel's speed
TIMED_N = 2**25  # 128 MiB read: far larger than any L2
EXAMPLE = np.arange(10, dtype=np.float32)
SLOW_HINT = ("a correct reduction this slow usually reads x uncoalesced (each thread a contiguous chunk instead "
             "of a grid-stride loop), launches too few blocks, or makes many atomics to one address")


@dataclass(frozen=True)
class Total:
    """The expected sum and how far a float32 sum may land from it."""

    value: float
    tolerance: float

    def __repr__(self) -> str:
        return f"[{self.value:.9g}] (± {self.tolerance:.3g})"


def same_total(got, expected: Total) -> bool:
    """A one-element float array within ``expected.tolerance`` of ``expected.value``."""
    if not isinstance(got, np.ndarray) or got.shape != (1,) or got.dtype.kind != "f":
        return False
    return bool(abs(float(got[0]) - expected.value) <= expected.tolerance)


def _integers(g, n: int) -> np.ndarray:
    """n small nonzero integers (-8..8) as float32: every partial sum of at most 2^21 of them is exact."""
    values = g.integers(1, 9, size=n) * g.choice([-1, 1], size=n)
    return values.astype(np.float32)


def _exact(label: str, x: np.ndarray) -> Case:
    return Case(f"{label}: n = {x.size}", (x,), expected=Total(sum_reference(x), 0.0), check_result=float32_result)


def _random(label: str, x: np.ndarray) -> Case:
    total = sum_reference(x)
    return Case(f"{label}: n = {x.size}, floats in [0, 1)", (x,), expected=Total(total, RTOL_RANDOM * total),
                check_result=float32_result)


def reduce_sum_cases(g) -> list[Case]:
    """The example, no element, one, either side of a warp and of a block, random sizes, 2^20 + 1, 4 M floats."""
    cases = [_exact("the example, x = 0, 1, ..., 9", EXAMPLE), _exact("empty", np.zeros(0, dtype=np.float32))]
    for label, n in (("one element", 1), ("a warp less one", 31), ("a warp and one", 33),
                     ("a block less one", 255), ("a block and one", 257),
                     ("random size", int(g.integers(1000, 100_000))), ("2^20 + 1", 2**20 + 1)):
        cases.append(_exact(label, _integers(g, n)))
    cases.append(_random("more than a grid sized to the GPU", g.random(2**22 + int(g.integers(1, 256)),
                                                                       dtype=np.float32)))
    return cases


def reduce_sum_timed(g) -> TimedCase:
    x = g.random(TIMED_N, dtype=np.float32)
    total = sum_reference(x)
    def expected_of(course_result) -> Total:  # the course's kernel's sum, within twice the tolerance of the exact one
        return Total(float(np.asarray(course_result).reshape(-1)[0]), 2 * RTOL_RANDOM * total)

    return TimedCase("n = 2^25 floats in [0, 1)", (x,), sum_atomic, 4 * TIMED_N, FLOOR, SLOW_HINT,
                     expected_of=expected_of)


@speed_point
def check_reduce_sum(fn) -> None:
    """``fn(x)`` -> sum(x) as a one-element float32 array, on the GPU: 10 cases, exact on small integers, within
    1e-4 of the float64 sum on random floats; then timed against the course's kernel (floor 60%)."""
    g = rng()
    check_kernel("reduce_sum", fn, lambda: reduce_sum_cases(g), same_total, lambda: reduce_sum_timed(g))


def race_reduce_sum(fn) -> KernelRace:
    """The learner's ``reduce_sum`` timed beside the course's kernel and a copy on this GPU (the "see it" cell)."""
    loader.require_gpu("race_reduce_sum")
    timed = reduce_sum_timed(rng())
    return timed.race(launcher(fn))[0]
