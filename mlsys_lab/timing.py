"""Timing that is honest on both backends.

``benchmark(fn)`` runs ``fn`` a few times to warm up (JIT compilation, caches, clocks), then times
``repeat`` runs: with CUDA events on the GPU stream when CuPy is the backend (host timers would time
the kernel *launch*, not the kernel), with ``time.perf_counter`` on the CPU. Report the median: one
slow run (a page fault, another process) moves the mean but not the median.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from mlsys_lab import backend
from mlsys_lab.units import format_seconds
from mlsys_lab.validation import check_int


@dataclass(frozen=True)
class Timing:
    """Times of ``repeat`` runs, in seconds."""

    samples: tuple[float, ...]
    device: str  # "gpu" (CUDA events) or "cpu" (perf_counter)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:  # noqa: A003  (mirrors the statistic's name)
        return min(self.samples)

    @property
    def max(self) -> float:  # noqa: A003
        return max(self.samples)

    def __str__(self) -> str:
        return f"median {format_seconds(self.median)} (min {format_seconds(self.min)}, {len(self.samples)} runs)"


L2_FLUSH_BYTES = 512 * 2**20  # for ``flush_bytes``: larger than the L2 cache of any current GPU (H200: 60 MiB)


def benchmark(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 20, use_gpu: bool | None = None,
              flush_bytes: int = 0) -> Timing:
    """Time ``fn()``: ``warmup`` untimed runs, then ``repeat`` timed runs.

    ``use_gpu`` defaults to whether the backend is CuPy. On the GPU each run is bracketed by CUDA
    events recorded on the current stream, so the time is the device's, not the host's.

    ``flush_bytes`` (GPU only; ignored on the CPU): before each timed run, fill a scratch buffer of that
    size (:data:`L2_FLUSH_BYTES` is a good value), as
    ``triton.testing.do_bench`` does. Make it larger than the L2 cache and it does two things: the run
    starts with a cold L2 (no bytes left over from the previous run), and the GPU is still busy filling
    while the host prepares ``fn``'s launch, so the start event fires when the GPU reaches it instead of
    while it waits for the host. Without it, a kernel of ~100 µs behind ~20-50 µs of Python launch work
    is timed as if it ran at two thirds of its speed.
    """
    check_int("warmup", warmup, low=0)
    check_int("repeat", repeat, low=1)
    check_int("flush_bytes", flush_bytes, low=0)
    gpu = backend.on_gpu if use_gpu is None else use_gpu
    if gpu and not backend.on_gpu:
        raise ValueError("use_gpu=True needs the CuPy backend; this session runs on NumPy")
    for _ in range(warmup):
        fn()
    if gpu:
        return Timing(tuple(_gpu_samples(fn, repeat, flush_bytes)), "gpu")
    backend.sync()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples), "cpu")


def _gpu_samples(fn: Callable[[], object], repeat: int, flush_bytes: int = 0) -> list[float]:
    xp = backend.xp
    cuda = xp.cuda
    start, stop = cuda.Event(), cuda.Event()
    scratch = xp.empty(flush_bytes // 4, dtype=xp.int32) if flush_bytes >= 4 else None
    samples = []
    for _ in range(repeat):
        if scratch is not None:
            scratch.fill(0)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(cuda.get_elapsed_time(start, stop) / 1e3)  # ms -> s
    return samples
