"""Memory planning over a graph, and a caching allocator simulation (内存规划 and 内存池).

* Liveness: a tensor is live from the step that produces it to the last step that reads it.
* Lower bound: at the busiest step, every live tensor needs its own bytes; no plan can use less.
* Planner: place every tensor at an offset in one arena so that tensors live at the same time never
  overlap; "greedy by size" (largest first, each in the smallest gap that fits) comes close to the
  bound (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference", 2020; TFLite).
* Caching allocator: instead of asking the device for memory (cudaMalloc, slow and synchronising) on every
  allocation, keep freed blocks in a pool and hand them out again (PyTorch's CUDACachingAllocator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlsys_lab.operators.ir import Graph
from mlsys_lab.validation import check_int, check_sequence, check_str, check_type


@dataclass(frozen=True)
class Interval:
    """Tensor ``name`` of ``n_bytes`` is live during steps ``start`` .. ``end`` inclusive."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"name", "start", "end", "n_bytes", "overlaps"})

    name: str
    start: int
    end: int
    n_bytes: int

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_int("start", self.start, low=0)
        if check_int("end", self.end, low=0) < self.start:
            raise ValueError(f"end must be >= start={self.start} (steps start .. end inclusive); got {self.end}")
        check_int("n_bytes", self.n_bytes, low=0)

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def liveness(graph: Graph) -> list[Interval]:
    """Live intervals of every tensor the graph allocates (not its inputs or constants), in steps.

    Step i is the i-th kernel of the graph's order. Outputs stay live to the last step. A reshape is a view:
    it extends the life of the tensor it views and has no bytes of its own.
    """
    check_type("graph", graph, Graph)
    steps = [n for n in graph.nodes if n.op not in ("input", "const")]
    step_of = {n.name: i for i, n in enumerate(steps)}
    owner = {}  # a view's name -> the tensor that owns its bytes
    for node in steps:
        owner[node.name] = owner.get(node.inputs[0], node.inputs[0]) if node.op == "reshape" else node.name
    end = {n.name: step_of[n.name] for n in steps}
    for node in steps:
        for name in node.inputs:
            if name in owner:
                end[owner[name]] = max(end[owner[name]], step_of[node.name])
    for name in graph.outputs:
        if name in owner:
            end[owner[name]] = len(steps) - 1
    return [Interval(n.name, step_of[n.name], end[n.name], n.n_bytes) for n in steps if n.op != "reshape"]


def _check_intervals(intervals) -> list:
    if not all(isinstance(iv, Interval) for iv in check_sequence("intervals", intervals)):
        raise TypeError("intervals must be a list of Interval (as liveness returns)")
    return intervals


def _check_events(events) -> None:
    for event in check_sequence("events", events):
        if not (isinstance(event, tuple) and len(event) == 3 and event[0] in ("alloc", "free")
                and isinstance(event[2], int) and event[2] >= 0):
            raise TypeError(f"events must be (action, tensor, n_bytes) tuples as allocation_events returns; "
                            f"got {event!r:.60}")


def live_bytes_per_step(intervals: list[Interval]) -> np.ndarray:
    """Bytes live at each step: Σ n_bytes over the intervals that contain the step."""
    _check_intervals(intervals)
    n_steps = max((iv.end for iv in intervals), default=-1) + 1
    live = np.zeros(n_steps, dtype=np.int64)
    for iv in intervals:
        live[iv.start : iv.end + 1] += iv.n_bytes
    return live


def peak_live_bytes(graph: Graph) -> int:
    """The lower bound on any plan's arena for this order of the graph: max over steps of live bytes."""
    check_type("graph", graph, Graph)
    live = live_bytes_per_step(liveness(graph))
    return int(live.max()) if live.size else 0


def lower_bound_bytes(intervals: list[Interval]) -> int:
    """max over steps of the live bytes: tensors live together cannot share memory."""
    _check_intervals(intervals)
    live = live_bytes_per_step(intervals)
    return int(live.max()) if live.size else 0


def no_reuse_bytes(intervals: list[Interval]) -> int:
    """Static allocation with no sharing: every tensor keeps its own buffer for the whole run."""
    _check_intervals(intervals)
    return int(sum(iv.n_bytes for iv in intervals))


def align(n_bytes: int, alignment: int = 64) -> int:
    """Round up to a multiple of ``alignment``."""
    check_int("n_bytes", n_bytes, low=0)
    check_int("alignment", alignment, low=1)
    return -(-n_bytes // alignment) * alignment


def plan_greedy_by_size(intervals: list[Interval], alignment: int = 64) -> dict[str, int]:
    """Offsets in one arena: largest tensor first, each at the smallest gap among the tensors it overlaps
    in time that fits it (best fit), else on top of them. Returns name -> byte offset.
    """
    _check_intervals(intervals)
    check_int("alignment", alignment, low=1)
    placed: list[tuple[int, Interval]] = []
    offsets: dict[str, int] = {}
    for iv in sorted(intervals, key=lambda iv: (-iv.n_bytes, iv.start, iv.name)):
        size = align(iv.n_bytes, alignment)
        busy = sorted(
            (off, off + align(other.n_bytes, alignment)) for off, other in placed if other.overlaps(iv)
        )
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        offset = best if best is not None else cursor
        offsets[iv.name] = offset
        placed.append((offset, iv))
    return offsets


def arena_bytes(intervals: list[Interval], offsets: dict[str, int]) -> int:
    """Size of the arena a plan needs: max over tensors of offset + n_bytes."""
    _check_intervals(intervals)
    check_type("offsets", offsets, dict)
    return max((offsets[iv.name] + iv.n_bytes for iv in intervals), default=0)


def plan_conflicts(intervals: list[Interval], offsets: dict[str, int]) -> list[tuple[str, str]]:
    """Pairs of tensors live at the same step whose byte ranges overlap (a valid plan has none)."""
    _check_intervals(intervals)
    check_type("offsets", offsets, dict)
    missing = [iv.name for iv in intervals if iv.name not in offsets]
    if missing:
        raise ValueError(f"offsets must give every tensor an offset; missing {', '.join(missing)}")
    conflicts = []
    for i, a in enumerate(intervals):
        for b in intervals[i + 1 :]:
            if (
                a.overlaps(b)
                and offsets[a.name] < offsets[b.name] + b.n_bytes
                and offsets[b.name] < offsets[a.name] + a.n_bytes
            ):
                conflicts.append((a.name, b.name))
    return conflicts


@dataclass(frozen=True)
class AllocatorStats:
    """What an allocator did over a run: device allocations (cudaMalloc calls) and the peak it reserved."""

    device_allocations: int
    device_frees: int
    peak_reserved_bytes: int

    def __post_init__(self) -> None:
        for name in ("device_allocations", "device_frees", "peak_reserved_bytes"):
            check_int(name, getattr(self, name), low=0)


def allocation_events(graph: Graph, n_iterations: int = 1) -> list[tuple[str, str, int]]:
    """The (action, tensor, n_bytes) sequence an eager run makes, ``n_iterations`` times:
    ("alloc", name, n) when a node runs, ("free", name, n) after its last use."""
    check_type("graph", graph, Graph)
    n_iterations = check_int("n_iterations", n_iterations, low=1, high=10**4)
    intervals = liveness(graph)
    events = []
    for it in range(n_iterations):
        for step in range(max((iv.end for iv in intervals), default=-1) + 1):
            events += [("alloc", f"{iv.name}@{it}", iv.n_bytes) for iv in intervals if iv.start == step]
            events += [("free", f"{iv.name}@{it}", iv.n_bytes) for iv in intervals if iv.end == step]
    return events


def simulate_naive_allocator(events: list[tuple[str, str, int]]) -> AllocatorStats:
    """Every alloc is a device allocation, every free a device free."""
    _check_events(events)
    live = peak = allocs = frees = 0
    for action, _, n in events:
        if action == "alloc":
            allocs, live = allocs + 1, live + n
            peak = max(peak, live)
        else:
            frees, live = frees + 1, live - n
    return AllocatorStats(allocs, frees, peak)


def simulate_caching_allocator(events: list[tuple[str, str, int]], block_bytes: int = 512) -> AllocatorStats:
    """A pool: sizes rounded up to ``block_bytes``; a free block goes to the pool; an alloc takes the
    smallest pooled block that fits and is at most twice the request, else allocates from the device.
    Nothing is returned to the device (as PyTorch's allocator, until ``empty_cache``).
    """
    _check_events(events)
    block_bytes = check_int("block_bytes", block_bytes, low=1)
    pool: list[int] = []
    held: dict[str, int] = {}
    reserved = peak = allocs = 0
    for action, name, n in events:
        size = align(n, block_bytes)
        if action == "alloc":
            fits = [b for b in pool if size <= b <= 2 * size]
            if fits:
                block = min(fits)
                pool.remove(block)
            else:
                block, allocs, reserved = size, allocs + 1, reserved + size
                peak = max(peak, reserved)
            held[name] = block
        else:
            pool.append(held.pop(name))
    return AllocatorStats(allocs, 0, peak)
