"""Checks of lesson 09's replay and failure-detection exercises (their references live here, not in the library)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.fault_tolerance.detection import simulate_trace
from mlsys_lab.fault_tolerance.reliability import llama3_interruptions
from mlsys_lab.fault_tolerance.simulate import failure_log
from mlsys_lab.units import DAY


# --- replay a failure log ------------------------------------------------------------------------------
def reference_replay_goodput(failure_times, work_seconds, interval, checkpoint_seconds, restart_seconds) -> float:
    """Work / wall-clock seconds of a job of ``work_seconds`` under the failures at ``failure_times``.

    From t = 0 the job works ``interval`` seconds (less for the last stretch), then checkpoints for
    ``checkpoint_seconds``; a stretch counts once its checkpoint has finished (a failure at that very
    moment comes after it). A failure loses what is not checkpointed and starts a restart of
    ``restart_seconds``, which a failure during it starts again. The job ends when the last checkpoint ends.
    """
    tau, c, r, work = float(interval), float(checkpoint_seconds), float(restart_seconds), float(work_seconds)
    t, done, restarting = 0.0, 0.0, False
    for failure in [*np.sort(np.asarray(failure_times, dtype=float)), math.inf]:
        if restarting:
            if t + r > failure:
                t = failure  # the restart itself was hit: it starts again
                continue
            t += r
            restarting = False
        while True:
            stretch = min(tau, work - done)
            end = t + stretch + c
            if end > failure:
                break
            t, done = end, done + stretch
            if done >= work:
                return work / t
        t, restarting = failure, True
    raise AssertionError("unreachable: the last 'failure' is at infinity")


def check_replay_goodput(fn: Callable) -> None:
    """``fn(failure_times, work_seconds, interval, checkpoint_seconds, restart_seconds)`` -> goodput."""
    g = rng()

    def case(label: str, times, work: float, tau: float, c: float, r: float) -> Case:
        times = np.asarray(times, dtype=float)
        return Case(label, (times, work, tau, c, r),
                    expected=reference_replay_goodput(times, work, tau, c, r))

    cases = [
        case("no failures: W=1000, τ=300, C=20, R=60 (the last stretch is 100 s)", [], 1000.0, 300.0, 20.0, 60.0),
        case("a failure during the first checkpoint (t=230; W=600, τ=200, C=50, R=100)",
             [230.0], 600.0, 200.0, 50.0, 100.0),
        case("a failure during the restart (t=50, then 120; W=300, τ=100, C=10, R=100)",
             [50.0, 120.0], 300.0, 100.0, 10.0, 100.0),
        case("a failure just as the first checkpoint ends (t=110; W=200, τ=100, C=10, R=30)",
             [110.0], 200.0, 100.0, 10.0, 30.0),
    ]
    for _ in range(4):  # random logs: whole-second costs, failures anywhere
        work, tau = float(g.integers(2_000, 20_000)), float(g.integers(100, 1_500))
        c, r = float(g.integers(5, 120)), float(g.integers(10, 600))
        times = np.sort(g.uniform(0.0, 3.0 * work, size=int(g.integers(3, 30))))
        cases.append(case(f"{len(times)} random failures, W={work:.0f}, τ={tau:.0f}, C={c:.0f}, R={r:.0f}",
                          times, work, tau, c, r))
    record = llama3_interruptions()
    window = record["days"] * DAY
    for _ in range(2):  # the Llama 3 record: 466 interruptions in 54 days, times drawn for the count
        times = failure_log(record["n_interruptions"], window, int(g.integers(0, 2**31)))
        mttf = window / record["n_interruptions"]
        c, r = float(g.integers(30, 181)), float(g.integers(300, 1_201))
        tau = float(round(math.sqrt(2 * c * mttf) * g.uniform(0.5, 2.0)))
        cases.append(case(f"Llama 3 log ({len(times)} interruptions in 54 days), W=40 days, τ={tau:.0f}, "
                          f"C={c:.0f}, R={r:.0f}", times, 40 * DAY, tau, c, r))
    check("replay_goodput", fn, cases)


# --- failure detection -----------------------------------------------------------------------------------
def reference_diagnose(enter, leave, timeout_seconds) -> dict:
    """The first hung collective (the ranks not in it ``timeout_seconds`` after the first rank entered), and
    the ranks whose median compute time (enter − previous leave) is over 1.15× the median rank's."""
    enter, leave = np.asarray(enter, dtype=float), np.asarray(leave, dtype=float)
    hang_step, hung, detected = None, [], None
    for step in range(len(enter)):
        if np.isnan(enter[step]).all():
            break
        deadline = np.nanmin(enter[step]) + timeout_seconds
        late = [int(r) for r in np.flatnonzero(~(enter[step] <= deadline))]  # NaN: never entered
        if late:
            hang_step, hung, detected = step, late, float(deadline)
            break
    done = len(enter) if hang_step is None else hang_step
    stragglers: list[int] = []
    if done > 0:
        previous = np.vstack([np.zeros((1, enter.shape[1])), leave[:done - 1]])
        medians = np.median(enter[:done] - previous, axis=0)
        stragglers = [int(r) for r in np.flatnonzero(medians > 1.15 * np.median(medians))]
    return {"hang_step": hang_step, "hung_ranks": hung, "detected_at": detected, "stragglers": stragglers}


def _same_diagnosis(got: Any, expected: dict) -> bool:
    if not isinstance(got, dict) or set(got) != set(expected):
        return False
    try:
        if (got["hang_step"] is None) != (expected["hang_step"] is None):
            return False
        if expected["hang_step"] is not None and (int(got["hang_step"]) != expected["hang_step"]
                                                  or abs(float(got["detected_at"]) - expected["detected_at"]) > 1e-9):
            return False
        if expected["hang_step"] is None and got["detected_at"] is not None:
            return False
        return (sorted(int(r) for r in got["hung_ranks"]) == expected["hung_ranks"]
                and sorted(int(r) for r in got["stragglers"]) == expected["stragglers"])
    except (TypeError, ValueError, KeyError):
        return False


def check_diagnose(fn: Callable) -> None:
    """``fn(enter, leave, timeout_seconds)`` -> {"hang_step", "hung_ranks", "detected_at", "stragglers"}."""
    g = rng()

    def case(label: str, timeout: float, **trace: Any) -> Case:
        n_ranks, n_steps = int(g.integers(6, 13)), int(g.integers(16, 41))
        trace = {k: v(n_ranks, n_steps) if callable(v) else v for k, v in trace.items()}
        paused = {r for _, r, _ in trace.get("extra_pauses", [])}
        healthy = sorted(set(range(n_ranks)) - set(trace.get("slow", {})) - paused)
        hits = np.nonzero(g.random((n_steps, len(healthy))) < 0.03)  # one-step pauses of healthy ranks, 3% of steps
        pauses = [(int(s), healthy[int(i)], float(g.uniform(2.0, 3.0))) for s, i in zip(*hits, strict=True)]
        enter, leave = simulate_trace(n_ranks, n_steps, int(g.integers(0, 2**31)),
                                      pauses=pauses + trace.pop("extra_pauses", []), **trace)
        expected = reference_diagnose(enter, leave, timeout)
        return Case(f"{n_ranks} ranks, {n_steps} steps, timeout {timeout:g} s: {label}", (enter, leave, timeout),
                    expected=expected)

    def ranks(k: int) -> Callable[[int, int], list[int]]:
        return lambda n, _: sorted(int(r) for r in g.choice(n, size=k, replace=False))

    one, two = ranks(1), ranks(2)
    cases = [
        case("healthy (jitter and pauses only)", 5.0),
        case("healthy, one rank with three 4-5× pauses", 5.0,
             extra_pauses=[(s, 0, float(g.uniform(4.0, 5.0))) for s in (3, 8, 13)]),
        case("one straggler", 5.0, slow=lambda n, s: {one(n, s)[0]: float(g.uniform(1.3, 2.0))}),
        case("two stragglers, then a rank never enters", 4.0,
             slow=lambda n, s: {r: float(g.uniform(1.3, 2.0)) for r in two(n, s)},
             hang=lambda n, s: (int(g.integers(5, s)), one(n, s))),
        case("a rank enters exactly at the timeout (in time), and a straggler", 3.0,
             arrive_at=lambda n, s: {(int(g.integers(1, s)), n - 1): 3.0}, slow=lambda n, s: {0: 1.5}),
        case("a rank enters after the timeout, another never", 3.0,
             arrive_at=lambda n, s: {(6, 1): float(g.uniform(3.5, 6.0))}, hang=lambda n, s: (6, [2])),
        case("two ranks never enter step 0", 5.0, hang=lambda n, s: (0, two(n, s))),
    ]
    check("diagnose", fn, cases, compare=_same_diagnosis)
