"""Macro scheduling (宏观调度) of a chain of dedicated units: serial vs pipelined.

A dedicated accelerator with one unit per operator type runs a chain of operators; one item (a batch)
visits every unit in turn. Serially, only one unit works at a time. Pipelined, unit i works on item j
while unit i+1 works on item j-1, so in steady state one item leaves every max(stage) seconds: the
slowest unit sets the pace and the others idle for the difference (their utilisation is stage/max).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.validation import check_array, check_finite, check_int, check_number, check_positive, check_sequence


@dataclass(frozen=True)
class PipelineTimes:
    """Seconds to push ``n_items`` through the units, and each unit's busy fraction when pipelined."""

    serial_seconds: float
    pipelined_seconds: float
    utilisation: tuple[float, ...]

    def __post_init__(self) -> None:
        check_finite("serial_seconds", self.serial_seconds, low=0.0)
        check_finite("pipelined_seconds", self.pipelined_seconds, low=0.0)
        for busy in check_sequence("utilisation", self.utilisation, min_size=1):
            check_number("utilisation", busy, low=0.0, high=1.0)

    @property
    def speedup(self) -> float:
        return self.serial_seconds / self.pipelined_seconds


def pipeline_times(stage_seconds: list[float] | tuple[float, ...], n_items: int) -> PipelineTimes:
    """serial = n·Σt; pipelined = Σt + (n - 1)·max t (fill, then one item per slowest stage)."""
    if not check_sequence("stage_seconds", stage_seconds):
        raise ValueError("stage_seconds must list at least one stage time; got an empty list")
    stages = [check_positive("stage_seconds[i]", t) for t in stage_seconds]
    n = check_int("n_items", n_items, low=1)
    slowest = max(stages)
    pipelined = sum(stages) + (n - 1) * slowest
    busy = tuple(n * t / pipelined for t in stages)
    return PipelineTimes(n * sum(stages), pipelined, busy)


# ------------------------------------------------------------ dynamic vs static scheduling of a task graph
# The notes' 动态调度 (a queue of ready operators, each dispatched to whichever unit is free when it becomes
# ready) against 静态调度 (every operator's unit and order fixed ahead of time from estimated costs).
# A task graph: ``durations[i]`` for task i, ``deps`` as (before, after) pairs.


def _check_durations(name: str, values) -> None:
    """Task durations (or estimates): a list of finite seconds >= 0, ValueError/TypeError naming ``name``."""
    check_sequence(name, values)
    array = check_array(name, values, ndim=1, min_size=0, finite=True)
    if array.size and float(array.min()) < 0:
        raise ValueError(f"{name} must be seconds >= 0; got {float(array.min())}")


def _dependents(n_tasks: int, deps: list[tuple[int, int]]) -> tuple[list[list[int]], list[int]]:
    for pair in check_sequence("deps", deps):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(i, int) for i in pair):
            raise TypeError(f"deps must be (before, task) pairs of task indices; got {pair!r:.40}")
    after: list[list[int]] = [[] for _ in range(n_tasks)]
    waiting = [0] * n_tasks
    for before, task in deps:
        if not (0 <= before < n_tasks and 0 <= task < n_tasks) or before == task:
            raise ValueError(f"deps must be pairs of distinct task indices in [0, {n_tasks}) (tasks of durations "
                             f"or estimates); got {(before, task)}")
        after[before].append(task)
        waiting[task] += 1
    return after, waiting


def list_schedule(durations: list[float], deps: list[tuple[int, int]], n_workers: int) -> list[tuple]:
    """Dynamic scheduling, simulated: a pool of ``n_workers`` and a ready queue.

    At every moment a worker is free and a task is ready (all its ``deps`` finished), the ready task of the
    lowest index starts on the free worker of the lowest index; tasks that finish at the same time all
    finish before the next assignment. Returns ``(task, worker, start, end)`` per task, in task order.
    """
    _check_durations("durations", durations)
    n_workers = check_int("n_workers", n_workers, low=1, high=4096)
    n = len(durations)
    after, waiting = _dependents(n, deps)
    ready = sorted(i for i in range(n) if waiting[i] == 0)
    free, running, placed = list(range(n_workers)), [], {}
    now = 0.0
    while len(placed) < n:
        while free and ready:
            task, worker = ready.pop(0), free.pop(0)
            placed[task] = (task, worker, now, now + durations[task])
            running.append(task)
        if not running:
            raise ValueError("deps must not form a cycle; some tasks can never start")
        now = min(placed[t][3] for t in running)
        for task in [t for t in running if placed[t][3] == now]:
            running.remove(task)
            free = sorted(free + [placed[task][1]])
            for nxt in after[task]:
                waiting[nxt] -= 1
                if waiting[nxt] == 0:
                    ready = sorted(ready + [nxt])
    return [placed[i] for i in range(n)]


def static_plan(estimates: list[float], deps: list[tuple[int, int]], n_workers: int) -> list[list[int]]:
    """Static scheduling: decide ahead, from *estimated* durations, which worker runs which tasks in which
    order (the list schedule of the estimates). Returns one task list per worker."""
    _check_durations("estimates", estimates)
    plan: list[list[int]] = [[] for _ in range(check_int("n_workers", n_workers, low=1, high=4096))]
    for task, worker, _start, _end in sorted(list_schedule(estimates, deps, n_workers), key=lambda r: (r[2], r[0])):
        plan[worker].append(task)
    return plan


def run_static(durations: list[float], deps: list[tuple[int, int]], plan: list[list[int]]) -> list[tuple]:
    """Simulate a static plan with the *actual* durations: each worker runs its list in order; a task starts
    when its worker is free and its deps are done. Returns ``(task, worker, start, end)`` per task."""
    _check_durations("durations", durations)
    for tasks in check_sequence("plan", plan, min_size=1):
        check_sequence("plan", tasks)
    if sorted(t for tasks in plan for t in tasks) != list(range(len(durations))):
        raise ValueError(f"plan must list every task 0..{len(durations) - 1} (one per entry of durations) exactly "
                         f"once; got {plan!r:.60}")
    n = len(durations)
    _dependents(n, deps)
    needs: list[list[int]] = [[] for _ in range(n)]
    for before, task in deps:
        needs[task].append(before)
    end: dict[int, float] = {}
    rows: dict[int, tuple] = {}
    position, free_at = [0] * len(plan), [0.0] * len(plan)
    while len(end) < n:
        progressed = False
        for w, tasks in enumerate(plan):
            while position[w] < len(tasks) and all(b in end for b in needs[tasks[position[w]]]):
                task = tasks[position[w]]
                start = max([free_at[w], *(end[b] for b in needs[task])])
                end[task] = free_at[w] = start + durations[task]
                rows[task] = (task, w, start, end[task])
                position[w] += 1
                progressed = True
        if not progressed:
            raise ValueError("plan must list every task once, in an order that respects deps")
    return [rows[i] for i in range(n)]


def makespan(rows: list[tuple]) -> float:
    """The end of the last task of a schedule of (task, worker, start, end) rows."""
    for row in check_sequence("rows", rows):
        if not isinstance(row, (tuple, list)) or len(row) != 4:
            raise TypeError(f"rows must be (task, worker, start, end) tuples; got {row!r:.40}")
        check_finite("rows", row[3])
    return max((r[3] for r in rows), default=0.0)
