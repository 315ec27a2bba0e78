"""A real dynamic scheduler: worker threads, a ready queue, tasks dispatched as their inputs finish.

:func:`run_on_threads` executes a task graph (``durations_s[i]`` seconds of work for task i, ``deps`` as
(before, after) pairs) on ``n_workers`` threads, and measures it. Without a plan it schedules dynamically:
a finished task pushes the tasks it unblocks onto a shared ready queue, and any idle worker takes the
ready task of the lowest index (the rule :func:`mlsys_lab.operators.schedule.list_schedule` simulates).
With a ``plan`` (one task list per worker, :func:`mlsys_lab.operators.schedule.static_plan`) each worker
runs its own list in order, waiting for dependencies: static scheduling.

A task's work is a sleep: it stands for a kernel on a device (or a request to another machine), whose
duration the host does not control and only learns when it finishes. That keeps the measurement about
scheduling, not about the two host cores that Python threads would share.
"""

from __future__ import annotations

import heapq
import threading
import time

from mlsys_lab.operators.schedule import _dependents
from mlsys_lab.validation import check_int


def run_on_threads(durations_s: list[float], deps: list[tuple[int, int]], n_workers: int,
                   plan: list[list[int]] | None = None) -> dict:
    """Run the task graph on real threads; returns ``{"seconds": wall time, "rows": (task, worker, start,
    end) per task, in seconds from the start}``."""
    n_workers = check_int("n_workers", n_workers, low=1)
    n = len(durations_s)
    after, waiting = _dependents(n, deps)
    if plan is not None and sorted(t for tasks in plan for t in tasks) != list(range(n)):
        raise ValueError("plan must list every task exactly once")
    lock = threading.Condition()
    ready = [i for i in range(n) if waiting[i] == 0]  # a heap: the lowest index first
    heapq.heapify(ready)
    rows: dict[int, tuple] = {}
    t0 = time.perf_counter()

    def work(task: int, worker: int) -> None:
        start = time.perf_counter() - t0
        time.sleep(durations_s[task])
        end = time.perf_counter() - t0
        with lock:
            rows[task] = (task, worker, start, end)
            for nxt in after[task]:
                waiting[nxt] -= 1
                if waiting[nxt] == 0 and plan is None:
                    heapq.heappush(ready, nxt)
            lock.notify_all()

    def dynamic_worker(worker: int) -> None:
        while True:
            with lock:
                while not ready and len(rows) < n:
                    lock.wait()
                if not ready:
                    return
                task = heapq.heappop(ready)
            work(task, worker)

    def static_worker(worker: int) -> None:
        for task in plan[worker]:
            with lock:
                while waiting[task] > 0:
                    lock.wait()
            work(task, worker)

    target = dynamic_worker if plan is None else static_worker
    threads = [threading.Thread(target=target, args=(w,)) for w in range(len(plan) if plan else n_workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": time.perf_counter() - t0, "rows": [rows[i] for i in range(n)]}
