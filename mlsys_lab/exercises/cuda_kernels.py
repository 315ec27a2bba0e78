"""Checks of kernels the learner writes in CUDA C: correct on hidden cases on this GPU, timed beside the course's.

An exercise's function is the learner's *launcher*: it compiles their source with
:func:`mlsys_lab.kernels.learner.compile_learner_kernel`, launches it on device (CuPy) arrays and returns a
device array. :func:`check_kernel` then

1. says in one line that the exercise needs a CUDA GPU and is not graded here, when the backend is NumPy (a
   ``Verdict`` with ``needs``, never a failure; the learner's function is not called);
2. runs the cases (NumPy arrays, copied to the GPU for the call, the result copied back), compared with the
   NumPy reference at the exercise's tolerance; an out-of-bounds access, which leaves the process's CUDA context
   unusable, is reported as such (``IllegalMemoryAccess``) with the case that caused it;
3. on a pass, times the launcher on a large case against the course's own kernel and a device-to-device copy
   of the same bytes, on the same GPU (:func:`race`), checks the timed result against the course kernel's, and
   adds a figure: "X GB/s, Y% of copy bandwidth, Z% of the course's kernel" (TFLOP/s and % of cuBLAS for a
   GEMM), and whether the exercise's floor (a fraction of the course's kernel, so that it means the same on a T4
   and an H200) is met. Correctness earns the exercise's point; meeting the floor earns its second
   (``Verdict.floor_met``, which the grader counts: :mod:`mlsys_lab.course.results`).

**Timing that does not trust the learner's process.** Every time is wall-clock seconds of ``repeat`` launches
followed by a device synchronize, measured around the request by the side that asks: in a lesson, this process;
when grading, the grader, which sends the request to the confined worker (the arguments cross, and are copied
to the GPU, once, before any clock starts: ``gpu_hold``) and reads its own ``perf_counter`` around the answer
(``gpu_seconds``; :class:`mlsys_lab.course.checks.LearnerFunction`). ``repeat`` is chosen so that one request
runs about :data:`TIMED_WINDOW_S`, a hundred times a socket round trip, so the exchange costs under 1%. The
course's kernel and the copy are timed the same way (launches, then a synchronize, inside one wall-clock
window) in this process on the same GPU: the grader's own process, which a learner's code cannot reach. The
three alternate for :data:`ROUNDS` rounds and the fastest round of each counts, so that what slows the GPU
meanwhile slows all three.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from mlsys_lab import backend
from mlsys_lab.backend import to_device, to_host
from mlsys_lab.exercises import (
    FAIL,
    Case,
    Verdict,
    evaluate,
    keep_learners_piece,
    not_graded_here,
    raised,
    report,
    short,
)
from mlsys_lab.units import format_seconds

NEEDS = "a CUDA GPU"
WHERE = "open the Colab badge for a free T4"
TIMED_WINDOW_S = 0.03  # one timed request: about a hundred socket round trips long
ROUNDS = 3
MAX_REPEAT = 2000
# How far above its ceiling measured in the same run a kernel's rate may be before its time is not believed: a
# kernel cannot move its minimum bytes faster than a copy of them (15% allows for noise and a copy's own
# overheads), nor beat cuBLAS on its own problem by half. Beyond that the launcher returned before its kernel
# finished (a synchronize skipped or replaced, a result kept from an earlier call), and the speed point is not given.
PLAUSIBLE_OF_CEILING = {"B": 1.15, "FLOP": 1.5}
SLOW_CALL_S = 0.5  # a launcher this slow is timed on its calibration runs alone


class IllegalMemoryAccess(RuntimeError):
    """The learner's kernel read or wrote outside its arrays; the process's CUDA context is lost."""


# ------------------------------------------------------------------ the learner's launcher, here or in a worker
def synchronize() -> None:
    """Wait for every kernel queued on this GPU, on any stream (a launcher may use its own)."""
    backend.xp.cuda.runtime.deviceSynchronize()


class InProcess:
    """The learner's launcher called in this process, through the protocol the grader's stand-in answers over
    its socket: ``gpu_call``, and ``gpu_hold`` / ``gpu_seconds`` / ``gpu_last`` for timing."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self.args, self.result = fn, (), None

    def gpu_call(self, args: tuple) -> Any:
        return to_host(self.fn(*to_device(args)))

    def gpu_hold(self, args: tuple) -> None:
        self.args, self.result = to_device(args), None

    def gpu_seconds(self, repeat: int) -> float:
        start = time.perf_counter()
        for _ in range(repeat):
            self.result = self.fn(*self.args)
        synchronize()
        return time.perf_counter() - start

    def gpu_last(self) -> Any:
        return to_host(self.result)


def launcher(fn: Callable):
    """``fn`` when it is the grader's stand-in (it answers the protocol itself), else :class:`InProcess` of it."""
    return fn if callable(getattr(type(fn), "gpu_seconds", None)) else InProcess(fn)


def called(runner) -> Callable:
    """``fn(*args)`` through ``runner``, with an out-of-bounds access named as such."""

    def call(*args: Any) -> Any:
        try:
            return runner.gpu_call(args)
        except Exception as exc:
            if backend.context_lost(f"{type(exc).__name__}: {exc}"):
                raise IllegalMemoryAccess(
                    "illegal memory access in your kernel (an index outside its arrays); this process's GPU "
                    "context is lost: restart the Python kernel before running anything else on the GPU") from None
            raise
    return call


# ------------------------------------------------------------------ timing: the learner's, the course's, a copy
@dataclass(frozen=True)
class KernelRace:
    """Best seconds per call of the learner's launcher ("yours"), the course's kernel ("course") and the ceiling
    they are measured against ("copy": a device-to-device copy of the same bytes, for a memory-bound kernel;
    "cuBLAS": the vendor library on the same problem, for a compute-bound one) on one GPU, and the work each does:
    bytes moved (``unit`` "B") or floating-point operations (``unit`` "FLOP")."""

    device: str
    seconds: dict[str, float]
    work: dict[str, int]  # the kernel's minimum traffic or its FLOPs ("yours", "course"), and the ceiling's
    floor: float  # the fraction of the course's kernel the exercise asks for
    unit: str = "B"
    anchor: str = "copy"  # the key of the ceiling in ``seconds``

    @property
    def rates(self) -> dict[str, float]:
        """Work per second of each: bytes/s or FLOP/s."""
        return {label: self.work[label] / self.seconds[label] for label in self.seconds}

    @property
    def of_course(self) -> float:
        """The learner's speed as a fraction of the course's kernel's."""
        return self.seconds["course"] / self.seconds["yours"]

    @property
    def plausible(self) -> bool:
        """Whether the learner's rate is one a kernel doing this work can reach: at most
        :data:`PLAUSIBLE_OF_CEILING` of the ceiling's, measured in the same run."""
        rates = self.rates
        return rates["yours"] <= PLAUSIBLE_OF_CEILING[self.unit] * rates[self.anchor]

    @property
    def met(self) -> bool:
        return self.plausible and self.of_course >= self.floor

    def figure(self, slow_hint: str = "") -> str:
        rates = self.rates
        what = "copy bandwidth" if self.anchor == "copy" else self.anchor
        text = (f"{format_rate(rates['yours'], self.unit)}, {rates['yours'] / rates[self.anchor]:.0%} of {what}, "
                f"{self.of_course:.0%} of the course's kernel ({format_seconds(self.seconds['yours'])} against "
                f"{format_seconds(self.seconds['course'])}) on {self.device}")
        if not self.plausible:
            return (f"{text}; not counted: faster than {what} measured in the same run, which no kernel doing this "
                    "work can be (does the launcher return before its kernel has finished?)")
        if self.met:
            return f"{text}; floor of {self.floor:.0%} of the course's kernel met"
        return f"{text}; below the floor of {self.floor:.0%} of the course's kernel" + (f": {slow_hint}" if slow_hint
                                                                                       else "")


def format_rate(rate: float, unit: str) -> str:
    """``2111 GB/s`` for bytes per second, ``41.3 TFLOP/s`` for FLOP per second."""
    return f"{rate / 1e9:.0f} GB/s" if unit == "B" else f"{rate / 1e12:.1f} TFLOP/s"


def seconds_here(fn: Callable[[], Any]) -> Callable[[int], float]:
    """``repeat`` -> wall seconds of ``repeat`` calls of ``fn`` then a synchronize, in this process."""

    def seconds(repeat: int) -> float:
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        synchronize()
        return time.perf_counter() - start
    return seconds


def race(runner, args: tuple, course: Callable, n_bytes: int, floor: float, n_flops: int = 0,
         anchor: Callable | None = None, anchor_label: str = "cuBLAS") -> tuple[KernelRace, Any, Any]:
    """Time the learner's launcher (through ``runner``) and ``course`` on ``args``, and their ceiling: a copy of
    ``n_bytes``, or, when ``n_flops`` is given, ``anchor`` (the vendor library) on the same arguments.

    Returns the race, the learner's last result and the course's result (both NumPy)."""
    xp = backend.xp
    # The course's arrays come from a memory pool of their own: a block freed by the course's kernel (holding the
    # right answer) is never handed to the learner's launcher, where it would hide elements their kernel skips.
    pool = xp.cuda.MemoryPool()
    with xp.cuda.using_allocator(pool.malloc):
        device_args = to_device(args)
        src = xp.ones(max(n_bytes // 8, 1), dtype=xp.float32)
        dst = xp.empty_like(src)
    course_out: list = [None]

    def run_course() -> None:
        with xp.cuda.using_allocator(pool.malloc):
            course_out[0] = course(*device_args)

    def run_anchor() -> None:
        with xp.cuda.using_allocator(pool.malloc):
            anchor(*device_args)

    if n_flops:
        if anchor is None:
            raise ValueError("a compute-bound race (n_flops > 0) needs its anchor: the vendor library's call")
        ceiling, work = (anchor_label, seconds_here(run_anchor)), {"yours": n_flops, "course": n_flops,
                                                                   anchor_label: n_flops}
    else:
        ceiling, work = ("copy", seconds_here(lambda: xp.copyto(dst, src))), {"yours": n_bytes, "course": n_bytes,
                                                                            "copy": 2 * src.nbytes}
    runner.gpu_hold(args)
    timers = {"yours": runner.gpu_seconds, "course": seconds_here(run_course), ceiling[0]: ceiling[1]}
    repeat, best = {}, {}
    for label, seconds in timers.items():
        seconds(1)  # warm-up: compiles, allocates
        best[label] = max(seconds(1), 1e-9)
        repeat[label] = int(min(max(math.ceil(TIMED_WINDOW_S / best[label]), 1), MAX_REPEAT))
    for _ in range(ROUNDS):
        for label, seconds in timers.items():
            if best[label] < SLOW_CALL_S:
                best[label] = min(best[label], max(seconds(repeat[label]), 1e-9) / repeat[label])
    result = KernelRace(backend.device_name(), best, work, floor, "FLOP" if n_flops else "B", ceiling[0])
    return result, runner.gpu_last(), to_host(course_out[0])


# ------------------------------------------------------------------ the check
def speed_point(check_fn: Callable) -> Callable:
    """Mark ``check_<name>`` as an exercise with a second point for speed, so that the grader puts two points at
    stake for every submission of it, also one whose kernel crashed or hung before any verdict."""
    check_fn.speed_point = True
    return check_fn


@dataclass
class TimedCase:
    """The large case the launcher is timed on, with the course's kernel for it and the bytes it must move."""

    label: str
    args: tuple
    course: Callable  # the course's launcher, called with device copies of ``args``
    n_bytes: int
    floor: float
    slow_hint: str = ""  # what a correct kernel below the floor usually gets wrong
    expected_of: Callable[[Any], Any] = lambda course_result: course_result  # what to compare the timed result with
    # Correct but slow kernels of the course, by what they get wrong ("bank-conflicted: ..."): below the floor, the
    # figure names the one whose time is closest to the learner's.
    lookalikes: dict[str, Callable] = field(default_factory=dict)
    # A compute-bound kernel (a GEMM) counts FLOPs, not bytes: its figure is TFLOP/s, and its ceiling is
    # ``anchor`` (the vendor library on the same device arguments, e.g. cuBLAS through ``a @ b``), not a copy.
    n_flops: int = 0
    anchor: Callable | None = None
    anchor_label: str = "cuBLAS"

    def race(self, runner) -> tuple[KernelRace, Any, Any]:
        """:func:`race` on this case."""
        return race(runner, self.args, self.course, self.n_bytes, self.floor, self.n_flops, self.anchor,
                    self.anchor_label)


def check_kernel(name: str, fn: Callable, make_cases: Callable[[], list[Case]], compare: Callable[[Any, Any], bool],
                 make_timed: Callable[[], TimedCase] | None = None) -> Verdict:
    """The verdict on the learner's launcher ``fn``: the module docstring's steps 1-3; prints its line. The cases
    and the timed case are made only where they will run (``make_cases()``, then ``make_timed()``)."""
    if not backend.on_gpu:
        return not_graded_here(name, NEEDS, WHERE)
    check_module = sys._getframe(1).f_globals.get("__name__", "")
    runner = launcher(fn)
    verdict = evaluate(name, called(runner), make_cases(), compare)
    if make_timed is None:
        if verdict.passed:
            keep_learners_piece(name, fn, check_module)
        return report(verdict)
    if not verdict.passed:  # the speed point is at stake too: a kernel that is not correct earns neither
        return report(replace(verdict, floor_met=False) if verdict.status == FAIL else verdict)
    timed = make_timed()
    try:
        result, got, course_result = timed.race(runner)
    except Exception as exc:  # the learner's launcher failed on the timed case
        return report(Verdict(name, FAIL, f"{FAIL} {name}: the timed case ({timed.label}): {raised(exc)}",
                              verdict.n_cases, floor_met=False))
    expected = timed.expected_of(course_result)
    try:
        same = compare(got, expected)
    except Exception:
        same = False
    if not same:
        return report(Verdict(name, FAIL, f"{FAIL} {name}: the timed case ({timed.label}), after repeated calls: got "
                              f"{short(got)}, the course's kernel gives {short(expected)}", verdict.n_cases,
                              floor_met=False))
    hint = timed.slow_hint
    if not result.met and timed.lookalikes:
        hint = closest(result.seconds["yours"], timed.lookalikes, to_device(timed.args)) + (f"; {hint}" if hint else "")
    keep_learners_piece(name, fn, check_module)
    return report(Verdict(name, verdict.status, verdict.line, verdict.n_cases, result.figure(hint),
                          floor_met=result.met))



def closest(seconds: float, lookalikes: dict[str, Callable], device_args: tuple) -> str:
    """Which of the course's slow kernels runs as fast as ``seconds`` a call: "it runs like <label> (<time>)"."""
    times = {}
    for label, kernel in lookalikes.items():  # run after the learner's timed calls: no pool to keep apart
        timer = seconds_here(lambda kernel=kernel: kernel(*device_args))
        timer(1)
        repeat = int(min(max(math.ceil(TIMED_WINDOW_S / max(timer(1), 1e-9)), 1), MAX_REPEAT))
        times[label] = min(timer(repeat) / repeat for _ in range(ROUNDS))
    label = min(times, key=lambda key: abs(math.log(times[key] / seconds)))
    return f"it runs like {label} ({format_seconds(times[label])} a call)"


def arrays_close(rtol: float, atol: float) -> Callable[[Any, Any], bool]:
    """A comparison of the learner's array with the expected one: an ndarray of the same shape with
    ``|got - expected| <= atol + rtol * |expected|`` everywhere (its dtype is :func:`float32_result`'s to judge)."""

    def compare(got: Any, expected: np.ndarray) -> bool:
        if not isinstance(got, np.ndarray) or got.shape != expected.shape or got.dtype.kind != "f":
            return False
        return bool(np.allclose(got, expected, rtol=rtol, atol=atol))
    return compare


def float32_result(got: Any) -> str | None:
    """A case's ``check_result``: the kernel's output must be float32, as its inputs are."""
    dtype = getattr(got, "dtype", None)
    return None if dtype == np.float32 else f"got an array of dtype {dtype}; the kernel's output is float32"
