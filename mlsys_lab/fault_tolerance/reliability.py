"""Fault tolerance (容错): how often a large job fails, and how often it should checkpoint.

Failures of independent components with exponential lifetimes add their rates: n components of
mean time to failure (MTTF) M fail, together, every M/n on average. A job that checkpoints every
τ seconds of work, pays C seconds per checkpoint and R seconds per restart loses, per failure, the
work since the last checkpoint plus R. Young (1974) balanced the two first-order costs,

    waste(τ) ≈ C/τ + (τ/2 + R)/M,   minimal at   τ* = √(2·C·M),

and Daly (2006) solved the same model without the first-order shortcut: with failures possible at
any moment (during work, checkpoints and restarts), one segment of τ + C seconds takes on average

    E[T_segment] = M·e^{R/M}·(e^{(τ+C)/M} − 1)      (Daly 2006)

so goodput (有效吞吐: useful work / wall-clock time) is τ / E[T_segment]. Its optimum needs a root
finder (:func:`optimal_interval`); Daly's series approximates it (:func:`daly_interval`).

The Monte-Carlo check of all this (and elastic training) is :mod:`mlsys_lab.fault_tolerance.simulate`; real
checkpoints are :mod:`mlsys_lab.fault_tolerance.checkpoint_io`, killed and resumed by
:mod:`mlsys_lab.fault_tolerance.kill_resume`;
storage bursts are :mod:`mlsys_lab.fault_tolerance.storage`.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import records
from mlsys_lab.validation import (
    check_array,
    check_finite,
    check_int,
    check_number,
    check_positive,
    check_sequence,
    check_type,
)


# --- failure arithmetic ----------------------------------------------------------------------------
def cluster_mttf(component_mttf: float, n_components: int) -> float:
    """MTTF of a job that stops when any of ``n_components`` fails: M/n (independent, exponential).

    Units are those of ``component_mttf``. 10,000 GPUs of 100 days each: 100·24·60/10,000 = 14.4 min.
    """
    check_positive("component_mttf", component_mttf)
    n = check_int("n_components", n_components, low=1)
    return component_mttf / n


def probability_no_failure(job_seconds: float, component_mttf_seconds: float, n_components: int) -> float:
    """P(a job of ``job_seconds`` on ``n_components`` sees no failure) = exp(−n·t/M)."""
    check_finite("job_seconds", job_seconds, low=0.0)
    check_positive("component_mttf_seconds", component_mttf_seconds)
    return float(np.exp(-job_seconds / cluster_mttf(component_mttf_seconds, n_components)))


def expected_failures(job_seconds: float, component_mttf_seconds: float, n_components: int) -> float:
    """Expected failures in ``job_seconds`` of wall-clock time: n·t/M (a Poisson count)."""
    check_finite("job_seconds", job_seconds, low=0.0)
    check_positive("component_mttf_seconds", component_mttf_seconds)
    return job_seconds / cluster_mttf(component_mttf_seconds, n_components)


def component_mttf_from_count(n_failures: int, seconds: float, n_components: int) -> float:
    """Invert the arithmetic: ``n_failures`` in ``seconds`` on ``n_components`` → per-component MTTF n·t/k."""
    k = check_int("n_failures", n_failures, low=1)
    check_positive("seconds", seconds)
    n = check_int("n_components", n_components, low=1)
    return n * seconds / k


def failure_shares(counts: dict[str, int]) -> dict[str, float]:
    """Fraction of failures per cause, from counts (e.g. Llama 3's Table 5)."""
    check_type("counts", counts, dict)
    for count in counts.values():
        check_int("counts", count, low=0)
    total = sum(counts.values())
    if total <= 0:
        raise ValueError(f"counts must hold at least one failure; got total {total}")
    return {name: count / total for name, count in counts.items()}


def failures_by_category(causes: list[dict]) -> dict[str, int]:
    """Failure counts summed per ``category`` over causes ``{"category": ..., "count": ...}``, in first-seen
    order (e.g. Llama 3's Table 5: the GPU, host, network and software rows of each kind added up)."""
    for cause in check_sequence("causes", causes):
        check_type("causes", cause, dict)
        if "category" not in cause or "count" not in cause:
            raise ValueError(f"causes must hold dicts with 'category' and 'count'; got {cause!r:.60}")
    totals: dict[str, int] = {}
    for cause in causes:
        totals[cause["category"]] = totals.get(cause["category"], 0) + check_int("count", cause["count"], low=0)
    return totals


def llama3_interruptions() -> dict:
    """Llama 3 405B's 54-day snapshot (Dubey et al. 2024, §3.3.4, Table 5), as recorded in the data file."""
    return records.load("fault_llama3_interruptions")


# --- checkpoint interval ---------------------------------------------------------------------------
def young_daly_interval(checkpoint_cost: float, mttf: float) -> float:
    """Young's first-order optimal checkpoint interval √(2·C·M) (Young 1974).

    ``checkpoint_cost`` C and ``mttf`` M in the same unit; the result is in that unit (work time
    between checkpoints). Holds when C ≪ M; :func:`daly_interval` and :func:`optimal_interval` do better.
    """
    c = check_positive("checkpoint_cost", checkpoint_cost)
    m = check_positive("mttf", mttf)
    if not np.isfinite(2 * c * m):
        raise ValueError(f"checkpoint_cost · mttf must be below 1e308 (a float); got {c:g} · {m:g}")
    return float(np.sqrt(2 * c * m))


def daly_interval(checkpoint_cost: float, mttf: float) -> float:
    """Daly's higher-order optimum (Daly 2006, the perturbation solution): for C < 2M,

    τ* = √(2CM)·[1 + ⅓·√(C/2M) + ⅑·(C/2M)] − C, and τ* = M when C ≥ 2M.
    """
    c = check_positive("checkpoint_cost", checkpoint_cost)
    m = check_positive("mttf", mttf)
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return float(np.sqrt(2 * c * m) * (1 + np.sqrt(x) / 3 + x / 9) - c)


def first_order_goodput(interval, checkpoint_seconds: float, restart_seconds: float, mttf_seconds: float):
    """Young's model: 1 − C/τ − (τ/2 + R)/M, clipped at 0. ``interval`` may be an array (seconds)."""
    tau = _intervals(interval)
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    m = check_positive("mttf_seconds", mttf_seconds)
    return np.maximum(1.0 - c / tau - (tau / 2 + r) / m, 0.0)


def product_goodput(interval, checkpoint_seconds: float, restart_seconds: float, mttf_seconds: float):
    """τ/(τ + C) · (1 − (τ/2 + R)/M), clipped at 0: the share of wall time spent on work, times the share
    of that work a failure does not throw away (half an interval plus the restart, once per MTTF).

    The same first-order model as :func:`first_order_goodput`, written as a product of the two shares
    instead of a sum of wastes (they agree to first order in C/τ and (τ/2 + R)/M); lesson 08 states
    goodput this way (Meta's MAST: the fraction of wall-clock time that yields kept progress).
    ``interval`` may be an array (seconds).
    """
    tau = _intervals(interval)
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    m = check_positive("mttf_seconds", mttf_seconds)
    return np.maximum(tau / (tau + c) * (1 - (tau / 2 + r) / m), 0.0)


def expected_goodput(interval, checkpoint_seconds: float, restart_seconds: float, mttf_seconds: float):
    """Exact goodput of the exponential model: τ / (M·e^{R/M}·(e^{(τ+C)/M} − 1)).

    Failures may strike during work, checkpoint writes and restarts alike; a failure during a write
    loses that segment (the previous checkpoint is intact). ``interval`` may be an array (seconds).
    """
    tau = _intervals(interval)
    c = check_finite("checkpoint_seconds", checkpoint_seconds, low=0.0)
    r = check_finite("restart_seconds", restart_seconds, low=0.0)
    m = check_positive("mttf_seconds", mttf_seconds)
    with np.errstate(over="ignore"):  # e^{(τ+C)/M} overflows to ∞ when τ ≫ M: goodput 0, as it should
        return tau / (m * np.exp(r / m) * np.expm1((tau + c) / m))


def optimal_interval(checkpoint_seconds: float, mttf_seconds: float) -> float:
    """The τ maximising :func:`expected_goodput` (R only scales it): the root of

    d/dτ [ln τ − ln(e^{(τ+C)/M} − 1)] = 1/τ − e^{(τ+C)/M} / (M·(e^{(τ+C)/M} − 1)) = 0, found by bisection.
    """
    c = check_positive("checkpoint_seconds", checkpoint_seconds)
    m = check_positive("mttf_seconds", mttf_seconds)
    low, high = 1e-9 * m, 50.0 * m + c

    def slope(tau: float) -> float:
        z = (tau + c) / m
        return 1.0 / tau - 1.0 / (m * -np.expm1(-z))

    for _ in range(200):  # the slope falls monotonically from +∞ to −1/M
        mid = np.sqrt(low * high)
        low, high = (mid, high) if slope(mid) > 0 else (low, mid)
    return float(np.sqrt(low * high))


def goodput_at_optimum(checkpoint_seconds, restart_seconds, mttf_seconds: float):
    """Best achievable goodput for each (C, R); broadcasts arrays of C and R (seconds)."""
    check_positive("mttf_seconds", mttf_seconds)
    c_arr, r_arr = (np.asarray(check_array(label, x, finite=True, min_size=0), float) for label, x in
                    (("checkpoint_seconds", checkpoint_seconds), ("restart_seconds", restart_seconds)))
    if np.any(c_arr <= 0) or np.any(r_arr < 0):
        raise ValueError("checkpoint_seconds must be > 0 and restart_seconds >= 0")
    try:
        c_arr, r_arr = np.broadcast_arrays(c_arr, r_arr)
    except ValueError as error:
        raise ValueError(f"restart_seconds must broadcast with checkpoint_seconds {c_arr.shape}; got "
                         f"{r_arr.shape}") from error
    out = np.empty(c_arr.shape)
    for index in np.ndindex(c_arr.shape):
        tau = optimal_interval(float(c_arr[index]), mttf_seconds)
        out[index] = expected_goodput(tau, float(c_arr[index]), float(r_arr[index]), mttf_seconds)
    return out


def restart_budget(target_goodput: float, checkpoint_seconds, mttf_seconds: float):
    """Largest restart cost R that still reaches ``target_goodput`` at the best interval, per C.

    R enters the exact model only as e^{−R/M}: goodput(τ*, C, R) = goodput(τ*, C, 0)·e^{−R/M}, so
    R_max = M·ln(goodput(τ*, C, 0) / target); NaN where even R = 0 misses the target.
    """
    target = check_number("target_goodput", target_goodput, low=0.0, high=1.0, low_inclusive=False)
    best = goodput_at_optimum(checkpoint_seconds, 0.0, mttf_seconds)
    with np.errstate(invalid="ignore", divide="ignore"):
        budget = mttf_seconds * np.log(best / target)
    return np.where(budget >= 0, budget, np.nan)


def _intervals(interval):
    tau = np.asarray(check_array("interval", interval, min_size=0), dtype=float)
    if tau.size == 0 or np.any(~np.isfinite(tau)) or np.any(tau <= 0):
        raise ValueError(f"interval must be > 0 seconds (a number or an array of them); got {interval!r}")
    return tau


