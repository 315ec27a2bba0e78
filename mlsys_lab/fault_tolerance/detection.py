"""Failure detection: a hung collective found by a watchdog, a straggler found from step times.

A synchronous data-parallel step is compute, then a collective (an all-reduce) that every rank must
enter before any can leave. A flight recorder (PyTorch's NCCL flight recorder, Megatron's straggler
detector) keeps, per rank and step, when the rank **entered** the collective and when it **left**:
``enter`` and ``leave``, arrays of shape (n_steps, n_ranks), seconds, NaN where it never happened.

* A rank that never enters (a hung kernel, a dead host) stalls everyone else inside the collective
  forever; a watchdog (NCCL's ``TORCH_NCCL_...TIMEOUT``) fires once the first rank has waited
  ``timeout`` seconds. Llama 3 counts 7 interruptions as "NCCL watchdog timeouts" (Table 5).
* A slow rank (a throttled GPU, a noisy neighbour) makes every step as slow as itself: the others
  wait for it in the collective, so *step times* are the same on every rank, and only the compute time
  ``enter[s, r] − leave[s − 1, r]`` shows who is slow.

:func:`simulate_trace` draws such traces (jitter, one-step pauses, stragglers, hangs);
:func:`run_ranks` makes one with real processes and a real watchdog thread.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np

from mlsys_lab.validation import check_int, check_number, check_sequence, check_type

RUN_SECONDS_MAX = 1.0  # run_ranks: steps × compute × slowdown at most this (a demonstration, not a benchmark)


def _checked_events(n_ranks: int, n_steps: int, slow, pauses, hang, arrive_at) -> tuple:
    """The optional events of :func:`simulate_trace`, checked: ranks and steps in range, factors in [1, 100]."""
    slow = {check_int("slow's rank", r, low=0, high=n_ranks - 1): check_number(f"slow[{r}]", f, low=1.0, high=100.0)
            for r, f in check_type("slow", {} if slow is None else slow, dict).items()}
    checked_pauses = []
    for item in check_sequence("pauses", [] if pauses is None else pauses):
        step, rank, factor = check_sequence("each pause (step, rank, factor)", item, min_size=3, max_size=3)
        checked_pauses.append((check_int("pause step", step, low=0, high=n_steps - 1),
                               check_int("pause rank", rank, low=0, high=n_ranks - 1),
                               check_number("pause factor", factor, low=1.0, high=100.0)))
    if hang is not None:
        step, ranks = check_sequence("hang (step, ranks)", hang, min_size=2, max_size=2)
        hang = (check_int("hang step", step, low=0, high=n_steps - 1),
                [check_int("hung rank", r, low=0, high=n_ranks - 1) for r in check_sequence("hung ranks", ranks,
                                                                                           min_size=1)])
    arrivals = {}
    for key, after in check_type("arrive_at", {} if arrive_at is None else arrive_at, dict).items():
        step, rank = check_sequence("arrive_at's key (step, rank)", key, min_size=2, max_size=2)
        arrivals[(check_int("arrive_at step", step, low=0, high=n_steps - 1),
                  check_int("arrive_at rank", rank, low=0, high=n_ranks - 1))] = check_number(
            "arrive_at seconds", after, low=0.0, high=1e6)
    return slow, checked_pauses, hang, arrivals


def simulate_trace(n_ranks: int, n_steps: int, seed: int = 0, compute_seconds: float = 1.0, jitter: float = 0.03,
                   comm_seconds: float = 0.1, slow: dict[int, float] | None = None,
                   pauses: list[tuple[int, int, float]] | None = None, hang: tuple[int, list[int]] | None = None,
                   arrive_at: dict[tuple[int, int], float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(enter, leave), each (n_steps, n_ranks) seconds, of a synchronous job starting at time 0.

    Rank r computes ``compute_seconds`` × ``slow[r]`` (1 if absent) × lognormal(``jitter``) per step,
    × f in the steps (s, r, f) of ``pauses`` (a garbage-collection pause); it enters the collective when
    done; all leave ``comm_seconds`` after the last one entered (± 1 ms each). ``hang = (step, ranks)``:
    those ranks never enter that step, nobody leaves it, and nothing after it happens (NaN).
    ``arrive_at[(step, rank)] = seconds after the first rank entered``: that rank enters exactly then.
    """
    n_ranks = check_int("n_ranks", n_ranks, low=2, high=4096)
    n_steps = check_int("n_steps", n_steps, low=1, high=100_000)
    check_number("compute_seconds", compute_seconds, low=0.0, high=1e6, low_inclusive=False)
    check_number("jitter", jitter, low=0.0, high=1.0)
    check_number("comm_seconds", comm_seconds, low=0.0, high=1e6)
    slow, pauses, hang, arrive_at = _checked_events(n_ranks, n_steps, slow, pauses, hang, arrive_at)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    compute = compute_seconds * np.exp(g.normal(0.0, jitter, size=(n_steps, n_ranks)))
    for rank, factor in slow.items():
        compute[:, rank] *= factor
    for step, rank, factor in pauses:
        compute[step, rank] *= factor
    spread = g.uniform(0.0, 1e-3, size=(n_steps, n_ranks))
    enter = np.full((n_steps, n_ranks), np.nan)
    leave = np.full((n_steps, n_ranks), np.nan)
    start = np.zeros(n_ranks)
    for step in range(n_steps):
        enter[step] = start + compute[step]
        for (s, rank), after in arrive_at.items():
            if s == step:
                others = np.delete(enter[step], rank)
                enter[step, rank] = others.min() + after
        if hang is not None and step == hang[0]:
            enter[step, list(hang[1])] = np.nan
            break
        leave[step] = enter[step].max() + comm_seconds + spread[step]
        start = leave[step]
    return enter, leave


# --- real processes and a watchdog thread ------------------------------------------------------------
def _rank(rank: int, n_steps: int, compute_seconds: float, factor: float, hang_step: int | None,
          enter, leave, barrier, t0: float, seed: int) -> None:
    g = np.random.default_rng(seed + rank)
    n_ranks = len(enter) // n_steps
    for step in range(n_steps):
        time.sleep(compute_seconds * factor * float(np.exp(g.normal(0.0, 0.05))))  # "compute"
        if step == hang_step:
            time.sleep(3600)  # a hung kernel: this rank never reaches the collective
        enter[step * n_ranks + rank] = time.monotonic() - t0
        barrier.wait()  # the collective: nobody leaves before everyone has entered
        leave[step * n_ranks + rank] = time.monotonic() - t0


def run_ranks(n_ranks: int = 4, n_steps: int = 12, compute_seconds: float = 0.02, slow: tuple[int, float] | None = None,
              hang: tuple[int, int] | None = None, timeout_seconds: float = 0.5, seed: int = 0) -> dict:
    """Run ``n_ranks`` real processes that compute (sleep) and meet in a barrier each step, watched by a
    watchdog thread that fires when a rank has waited ``timeout_seconds`` in a barrier some rank never reached.

    ``slow = (rank, factor)`` slows one rank; ``hang = (rank, step)`` stops one rank before that step's
    barrier. Returns ``enter``, ``leave`` (n_steps, n_ranks; seconds since the start, NaN never) and
    ``watchdog``: None or {"step", "ranks" (never entered), "first_entered", "fired_at"} as the thread saw it.
    Uses the fork start method (Linux, macOS).
    """
    check_int("n_ranks", n_ranks, low=2, high=16)
    check_int("n_steps", n_steps, low=1, high=1_000)
    check_number("compute_seconds", compute_seconds, low=0.0, high=0.1, low_inclusive=False)
    check_number("timeout_seconds", timeout_seconds, low=0.0, high=5.0, low_inclusive=False)
    check_int("seed", seed, low=0)
    if slow is not None:
        rank, factor = check_sequence("slow (rank, factor)", slow, min_size=2, max_size=2)
        slow = (check_int("slow rank", rank, low=0, high=n_ranks - 1), check_number("slow factor", factor, low=1.0,
                                                                                     high=10.0))
    if hang is not None:
        rank, step = check_sequence("hang (rank, step)", hang, min_size=2, max_size=2)
        hang = (check_int("hang rank", rank, low=0, high=n_ranks - 1), check_int("hang step", step, low=0,
                                                                                 high=n_steps - 1))
    longest = n_steps * compute_seconds * (slow[1] if slow else 1.0)
    if longest > RUN_SECONDS_MAX:
        raise ValueError(f"n_steps × compute_seconds × the slow factor must be at most {RUN_SECONDS_MAX} s "
                         f"(a demonstration); got {longest:g} s")
    context = multiprocessing.get_context("fork")
    enter = context.Array("d", [np.nan] * (n_steps * n_ranks), lock=False)
    leave = context.Array("d", [np.nan] * (n_steps * n_ranks), lock=False)
    barrier = context.Barrier(n_ranks)
    t0 = time.monotonic()
    workers = [context.Process(target=_rank, daemon=True, args=(
        r, n_steps, compute_seconds, slow[1] if slow and slow[0] == r else 1.0,
        hang[1] if hang and hang[0] == r else None, enter, leave, barrier, t0, seed)) for r in range(n_ranks)]
    for worker in workers:
        worker.start()
    report: list[dict] = []
    stop = threading.Event()

    def watchdog() -> None:
        while not stop.is_set():
            entered = np.array(enter[:]).reshape(n_steps, n_ranks)
            left = np.array(leave[:]).reshape(n_steps, n_ranks)
            waiting = [s for s in range(n_steps) if np.isnan(left[s]).any() and not np.isnan(entered[s]).all()]
            if waiting:
                step = waiting[0]
                first = float(np.nanmin(entered[step]))
                now = time.monotonic() - t0
                if now - first > timeout_seconds and np.isnan(entered[step]).any():
                    report.append({"step": step, "ranks": [int(r) for r in np.flatnonzero(np.isnan(entered[step]))],
                                   "first_entered": first, "fired_at": now})
                    for worker in workers:
                        worker.kill()  # as NCCL's watchdog aborts the communicator and the job
                    return
            time.sleep(0.002)

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    for worker in workers:
        worker.join()
    stop.set()
    thread.join()
    shape = (n_steps, n_ranks)
    return {"enter": np.array(enter[:]).reshape(shape), "leave": np.array(leave[:]).reshape(shape),
            "watchdog": report[0] if report else None}
