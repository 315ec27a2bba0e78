"""Scheduling at scale (the notes' 分布式训练的存储与调度挑战): goodput under checkpoints and failures.

*Goodput* (Meta's MAST) is the fraction of wall-clock time that produced training progress kept in
the end: time lost to failures (work since the last checkpoint, restart), checkpoint stalls,
communication blocking or pre-emption does not count.

How many bytes a checkpoint holds and how long it takes to write are lesson 09's
(:func:`mlsys_lab.fault_tolerance.storage.checkpoint_bytes`), as are its goodput models
(:mod:`mlsys_lab.fault_tolerance.reliability`). The one here charges the checkpoint stall as a
stretch of wall time, T/(T + S), where lesson 09's first-order model subtracts S/T: the two differ
at second order (84.4% against 83.0% for T = 10 min, S = 52 s, MTBF = 3 h, R = 10 min).
"""

from __future__ import annotations

from mlsys_lab.validation import check_number, check_positive


def goodput(step_seconds: float, checkpoint_interval_s: float, checkpoint_stall_s: float,
            mean_time_between_failures_s: float, restart_s: float) -> float:
    """Fraction of wall time that yields kept progress, for periodic checkpoints and random failures.

    Per checkpoint interval T the job also stalls S to save; a failure (rate 1/MTBF) loses on
    average half an interval of work plus the restart R. First-order (Young 1974):
        goodput ≈ T/(T + S) · (1 − (T/2 + R)/MTBF)
    """
    check_positive("step_seconds", step_seconds)
    t = check_positive("checkpoint_interval_s", checkpoint_interval_s)
    s = check_number("checkpoint_stall_s", checkpoint_stall_s, low=0.0)
    mtbf = check_positive("mean_time_between_failures_s", mean_time_between_failures_s)
    r = check_number("restart_s", restart_s, low=0.0)
    return max(0.0, t / (t + s) * (1 - (t / 2 + r) / mtbf))
