"""Storage and scheduling at scale (the notes' 分布式训练的存储与调度挑战): checkpoints and goodput.

A checkpoint holds the model states ZeRO counts: weights, and for resuming training the fp32
master copy and Adam moments, (2 + K)·Ψ bytes with K = 12 (gradients are not saved). Thousands of
GPUs write it at once, a burst that Meta's Tectonic-Shift absorbs with write buffering.

*Goodput* (Meta's MAST) is the fraction of wall-clock time that produced training progress kept in
the end: time lost to failures (work since the last checkpoint, restart), checkpoint stalls,
communication blocking or pre-emption does not count.
"""

from __future__ import annotations

from mlsys_lab.validation import check_number, check_positive


def checkpoint_bytes(n_params: float, bytes_per_param: float = 2,
                     optimizer_bytes_per_param: float = 12) -> float:
    """Bytes of a resumable checkpoint: (bytes_per_param + K)·Ψ (weights + fp32 master + Adam moments)."""
    psi = check_number("n_params", n_params, low=1.0)
    return (check_number("bytes_per_param", bytes_per_param, low=0.0)
            + check_number("optimizer_bytes_per_param", optimizer_bytes_per_param, low=0.0)) * psi


def checkpoint_write_seconds(n_bytes: float, write_bytes_per_s: float) -> float:
    """Seconds to write ``n_bytes`` at an aggregate file-system bandwidth (the stall if synchronous)."""
    return check_number("n_bytes", n_bytes, low=0.0) / check_positive("write_bytes_per_s", write_bytes_per_s)


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
