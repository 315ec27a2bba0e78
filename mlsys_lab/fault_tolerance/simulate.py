"""Monte-Carlo simulation of a checkpointed job under random failures, and of elastic training.

Trace-driven: draw the wall-clock gaps between failures once (exponential, mean M), then replay the
*same* trace under every checkpoint interval (common random numbers, so the goodput curves of two
intervals differ by the policy, not by luck). Within one gap g the job first restarts (R seconds,
except at the very start), then runs segments of τ seconds of work plus a C-second checkpoint; only
segments whose checkpoint finished before the gap ended count:

    committed(g) = τ · ⌊max(g − R, 0) / (τ + C)⌋

Long-run goodput is Σ committed / Σ gaps (renewal-reward theorem); it converges to
:func:`mlsys_lab.fault_tolerance.reliability.expected_goodput`. An asynchronous checkpoint stalls training only for the
in-memory snapshot S; the write W runs in the background and the checkpoint counts once written:
committed(g) = τ · ⌊(g − R − W) / (max(τ, W) + S)⌋.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_finite, check_int, check_positive


def failure_gaps(mttf_seconds: float, n_gaps: int, n_trials: int = 1, seed: int = 0) -> np.ndarray:
    """Wall-clock seconds between consecutive failures, shape (n_trials, n_gaps), exponential(mean M)."""
    check_positive("mttf_seconds", mttf_seconds)
    check_int("n_gaps", n_gaps, low=1, high=10**8)
    check_int("n_trials", n_trials, low=1, high=10**8 // n_gaps)  # at most 10**8 gaps (800 MB) in all
    check_int("seed", seed, low=0)
    return np.random.default_rng(seed).exponential(mttf_seconds, size=(n_trials, n_gaps))


def failure_log(n_failures: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Sorted failure times (seconds) of ``n_failures`` failures in a window of ``seconds``.

    A record that gives only a count (Llama 3: 466 interruptions in 54 days, no timestamps) is, for a
    Poisson process, a set of independent uniform times in the window: this draws one such log.
    """
    n = check_int("n_failures", n_failures, low=0, high=10**7)
    window = check_positive("seconds", seconds)
    return np.sort(np.random.default_rng(check_int("seed", seed, low=0)).uniform(0.0, window, size=n))


def committed_work(gaps: np.ndarray, interval, checkpoint_seconds: float, restart_seconds: float,
                   write_seconds: float = 0.0) -> np.ndarray:
    """Seconds of work each gap commits, for each interval: shape intervals.shape + gaps.shape.

    ``checkpoint_seconds`` is the stall per checkpoint (the whole write if blocking, the snapshot if
    asynchronous); ``write_seconds`` the background write of an asynchronous checkpoint (0: blocking).
    Every gap but the first of each trace starts with a restart.
    """
    tau = np.asarray(check_array("interval", interval, finite=True, min_size=0), dtype=float)
    if np.any(tau <= 0):
        raise ValueError(f"interval must be > 0 seconds; got {interval!r:.80}")
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    w = check_finite("write_seconds", write_seconds, low=0.0)
    gaps = np.asarray(check_array("gaps", gaps, ndim=(1, 2), finite=True), dtype=float)
    if np.any(gaps < 0):
        raise ValueError("gaps must be >= 0 seconds between failures")
    restart = np.full(gaps.shape, r)
    restart[..., 0] = 0.0  # the job starts fresh: no restart before the first gap
    tau_b = tau.reshape(tau.shape + (1,) * gaps.ndim)
    usable = np.maximum(gaps - restart - w, 0.0)
    return tau_b * np.floor(usable / (np.maximum(tau_b, w) + c))


def simulate_goodput(intervals, checkpoint_seconds: float, restart_seconds: float, mttf_seconds: float,
                     n_failures: int = 20_000, seed: int = 0, write_seconds: float = 0.0) -> np.ndarray:
    """Long-run goodput for each interval over one shared trace of ``n_failures`` failures."""
    check_int("n_failures", n_failures, low=1, high=10**7)
    tau = np.atleast_1d(np.asarray(check_array("intervals", intervals, finite=True), dtype=float))
    if np.any(tau <= 0):
        raise ValueError(f"intervals must be > 0 seconds; got {intervals!r:.80}")
    gaps = failure_gaps(mttf_seconds, n_failures, 1, seed)[0]
    out = np.empty(tau.shape)
    for start in range(0, tau.size, 16):  # 16 intervals at a time keeps the work array small
        block = tau[start:start + 16]
        out[start:start + 16] = committed_work(gaps, block, checkpoint_seconds, restart_seconds,
                                               write_seconds).sum(axis=-1) / gaps.sum()
    return out.reshape(np.shape(intervals)) if np.ndim(intervals) else out


def simulated_optimum(checkpoint_seconds: float, restart_seconds: float, mttf_seconds: float,
                      n_failures: int = 20_000, seed: int = 0,
                      n_points: int = 61) -> tuple[float, np.ndarray, np.ndarray]:
    """The interval with the best simulated goodput on a log grid around √(2CM) (×/÷ 4).

    Returns (best interval, grid, goodputs). The best point is refined by a parabola through the
    top three points in log τ, which smooths the trace's noise.
    """
    c = check_positive("checkpoint_seconds", checkpoint_seconds)
    young = np.sqrt(2 * c * check_positive("mttf_seconds", mttf_seconds))
    check_int("n_points", n_points, low=3, high=10_000)
    check_int("n_failures", n_failures, low=1, high=10**7)
    grid = young * np.logspace(-np.log10(4), np.log10(4), n_points)
    goodputs = simulate_goodput(grid, checkpoint_seconds, restart_seconds, mttf_seconds, n_failures, seed)
    i = int(np.clip(np.argmax(goodputs), 1, n_points - 2))
    x, y = np.log(grid[i - 1:i + 2]), goodputs[i - 1:i + 2]
    a, b, _ = np.polyfit(x, y, 2)
    best = float(np.exp(-b / (2 * a))) if a < 0 else float(grid[i])
    return float(np.clip(best, grid[0], grid[-1])), grid, goodputs


def simulate_job(work_seconds: float, interval: float, checkpoint_seconds: float, restart_seconds: float,
                 mttf_seconds: float, n_trials: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    """Finite job of ``work_seconds`` of work: wall-clock seconds, failures and goodput per trial.

    In gap k with r_k work left, the job finishes if the gap's usable time holds r_k plus its
    ⌈r_k/τ⌉ checkpoints; the first such gap ends the job (vectorized over trials).
    """
    work = check_positive("work_seconds", work_seconds)
    tau = check_positive("interval", interval)
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    m = check_positive("mttf_seconds", mttf_seconds)
    check_int("n_trials", n_trials, low=1, high=10**6)
    # enough gaps that every trial finishes: the expected count times 3, plus slack
    n_gaps = int(3 * (work + c * work / tau) / m / max(float(np.exp(-(tau + c + r) / m)), 1e-3)) + 50
    if n_gaps * n_trials > 10**8:
        raise ValueError(f"work_seconds={work:g} is {work / m:.3g} times mttf_seconds={m:g}: a trial would need "
                         f"{n_gaps} failure gaps ({n_trials} trials; at most 10**8 gaps in all; interval, "
                         f"checkpoint_seconds and restart_seconds set how much of each gap is lost)")
    gaps = failure_gaps(m, n_gaps, n_trials, seed)
    done = committed_work(gaps, tau, c, r)
    before = np.cumsum(done, axis=1) - done  # work committed before each gap
    left = work - before
    restart = np.full(gaps.shape, r)
    restart[:, 0] = 0.0
    needed = restart + left + c * np.ceil(np.maximum(left, 0) / tau)
    finishes = (gaps >= needed) & (left > 0)
    if not finishes.any(axis=1).all():
        raise ValueError("a trial did not finish: the interval is too long for this MTTF (goodput ≈ 0): interval + "
                         "checkpoint_seconds + restart_seconds must fit well inside mttf_seconds")
    k = np.argmax(finishes, axis=1)
    rows = np.arange(n_trials)
    wall = np.cumsum(gaps, axis=1)[rows, k] - gaps[rows, k] + needed[rows, k]
    return {"wall_seconds": wall, "n_failures": k, "goodput": work / wall}


def timeline(work_seconds: float, interval: float, checkpoint_seconds: float, restart_seconds: float,
             mttf_seconds: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One run, event by event, for plotting: (wall-clock seconds, work done, failure times).

    The work curve climbs during work, stays flat during checkpoints and restarts, and drops back to
    the last checkpoint at each failure.
    """
    work = check_positive("work_seconds", work_seconds)
    tau = check_positive("interval", interval)
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    t, committed, points, failures = 0.0, 0.0, [(0.0, 0.0)], []
    next_failure = rng.exponential(check_positive("mttf_seconds", mttf_seconds))
    restarting = False
    while committed < work and len(points) < 100_000:
        steps = [("restart", r)] if restarting else []
        segment = min(tau, work - committed)
        steps += [("work", segment), ("checkpoint", c)]
        start_committed, failed = committed, False
        for kind, seconds in steps:
            end = t + seconds
            if end > next_failure:  # the failure strikes inside this step
                done_here = next_failure - t if kind == "work" else 0.0
                progress = points[-1][1] + done_here
                points += [(next_failure, progress), (next_failure, start_committed)]
                failures.append(next_failure)
                t = next_failure
                next_failure = t + rng.exponential(mttf_seconds)
                failed = restarting = True
                break
            t = end
            points.append((t, points[-1][1] + (seconds if kind == "work" else 0.0)))
        if not failed:
            committed, restarting = start_committed + segment, False
    arr = np.array(points)
    return arr[:, 0], arr[:, 1], np.array(failures)


# --- elastic training ------------------------------------------------------------------------------
def simulate_elastic(policy: str, n_replicas: int, n_spares: int, replica_mttf_seconds: float,
                     repair_seconds: float, interval: float, checkpoint_seconds: float,
                     restart_seconds: float, reform_seconds: float, horizon_seconds: float,
                     dt_seconds: float = 60.0, n_trials: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    """Data-parallel job of ``n_replicas`` replicas with a pool of spares, in time steps of ``dt``.

    A replica (one data-parallel copy of the model, on several GPUs) fails at rate 1/MTTF per step
    and comes back repaired after ``repair_seconds``. On every failure the work since the last
    checkpoint is lost. Policies:

    * ``"restart"``: the job needs all ``n_replicas``; it takes a spare if one is free, else waits
      for a repair, then restarts every rank from the checkpoint (``restart_seconds``);
    * ``"elastic"`` (Singularity-style): the survivors re-form the ring and re-shard from the last
      checkpoint (``reform_seconds``) and continue at throughput ∝ replicas; a spare or repaired
      replica joins at the next checkpoint (another re-form, no work lost).

    Checkpoints block for ``checkpoint_seconds`` every ``interval`` seconds of running. Every cost is
    rounded to whole steps of ``dt_seconds`` (keep dt at or below the shortest cost that matters).
    Returns per-trial ``goodput`` (work done / (horizon · full-job throughput)) and the mean
    number of replicas in the job.
    """
    from mlsys_lab.validation import check_choice

    check_choice("policy", policy, ("restart", "elastic"))
    n = check_int("n_replicas", n_replicas, low=2, high=1 << 20)
    spares = check_int("n_spares", n_spares, low=0, high=1 << 20)
    dt = check_positive("dt_seconds", dt_seconds)
    p_fail = -np.expm1(-dt / check_positive("replica_mttf_seconds", replica_mttf_seconds))
    steps_of = {name: max(int(round(check_finite(name, value, low=0.0) / dt)), 0) for name, value in
                {"repair_seconds": repair_seconds, "checkpoint_seconds": checkpoint_seconds,
                 "restart_seconds": restart_seconds, "reform_seconds": reform_seconds}.items()}
    repair, ckpt, restart, reform = (steps_of[k] for k in ("repair_seconds", "checkpoint_seconds",
                                                           "restart_seconds", "reform_seconds"))
    tau = check_positive("interval", interval)
    n_steps = int(check_positive("horizon_seconds", horizon_seconds) / dt)
    if n_steps > 10**7:
        raise ValueError(f"horizon_seconds must be at most 1e7 time steps of {dt:g} s; got {horizon_seconds:g} s")
    if n_steps < 1:
        raise ValueError(f"horizon_seconds must be at least one time step (dt_seconds={dt:g}); got {horizon_seconds}")
    for name, steps in steps_of.items():  # the simulation keeps arrays of these many steps
        if steps > 10**7:
            raise ValueError(f"{name} must be at most 1e7 time steps of {dt:g} s; got {steps} steps")
    trials = check_int("n_trials", n_trials, low=1, high=10**6)
    rng = np.random.default_rng(check_int("seed", seed, low=0))

    in_job = np.full(trials, n)
    free = np.full(trials, spares)
    returns = np.zeros((trials, repair + 1), dtype=int)  # replicas coming back, by step mod (repair+1)
    paused = np.zeros(trials, dtype=int)  # steps left of restart / re-form / checkpoint
    waiting = np.zeros(trials, dtype=bool)  # restart policy: short of replicas
    since_ckpt = np.zeros(trials)
    uncommitted = np.zeros(trials)
    committed = np.zeros(trials)
    replica_steps = np.zeros(trials)
    for step in range(n_steps):
        slot = step % (repair + 1)
        free += returns[:, slot]
        returns[:, slot] = 0
        failed = rng.binomial(in_job, p_fail)
        hit = failed > 0
        in_job -= failed
        returns[:, (step + repair) % (repair + 1)] += failed if repair > 0 else 0
        if repair == 0:
            free += failed
        uncommitted[hit] = 0.0
        since_ckpt[hit] = 0.0
        take = np.minimum(free, n - in_job)
        if policy == "restart":
            in_job += take
            free -= take
            full = in_job == n
            starting = (hit | waiting) & full
            paused[starting] = restart
            waiting = ~full
        else:
            # replacements take the failed replicas' place at once; other joins wait for a checkpoint
            in_job[hit] += take[hit]
            free[hit] -= take[hit]
            paused[hit] = reform
            waiting = in_job < 1
        running = (paused == 0) & ~waiting
        rate = in_job / n
        uncommitted[running] += rate[running] * dt
        since_ckpt[running] += dt
        replica_steps += in_job
        paused[~running & (paused > 0)] -= 1
        due = running & (since_ckpt >= tau)
        committed[due] += uncommitted[due]
        uncommitted[due] = 0.0
        since_ckpt[due] = 0.0
        paused[due] = ckpt
        if policy == "elastic":  # joins at the checkpoint just taken
            join = due & (free > 0) & (in_job < n)
            add = np.minimum(free, n - in_job) * join
            in_job += add
            free -= add
            paused[join] += reform
    horizon = n_steps * dt  # work not yet checkpointed at the end does not count
    return {"goodput": committed / horizon, "mean_replicas": replica_steps / n_steps}
