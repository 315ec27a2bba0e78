"""Lesson 09, fault tolerance: failure rates of clusters, checkpoint intervals and goodput, crash-safe
checkpoints, checkpoint storage, elastic training.

    from mlsys_lab.fault_tolerance import cluster_mttf, young_daly_interval, expected_goodput
    m = cluster_mttf(100 * DAY, 10_000)             # 14.4 min for 10,000 GPUs of 100 days each
    tau = young_daly_interval(30.0, m)              # √(2CM) seconds of work between checkpoints

* :mod:`.reliability`: how often a large job fails, and how often it should checkpoint: MTTF arithmetic,
  Young's and Daly's intervals, goodput (first order, product form, exact), restart budgets.
* :mod:`.simulate`: Monte-Carlo replay of a checkpointed job under random failures, and of elastic training.
* :mod:`.checkpoint_io`: real checkpoints: the whole training state, atomic writes that survive SIGKILL,
  asynchronous checkpointing.
* :mod:`.kill_resume`: kill a training run with SIGKILL at random points, resume it, compare bit for bit.
* :mod:`.resume`: a job that keeps every checkpoint, each made complete by a manifest (size, SHA-256) written last.
* :mod:`.detection`: flight records (collective entry/leave per rank and step), simulated or measured with real
  processes and a watchdog thread: hung collectives and stragglers.
* :mod:`.storage`: checkpoints as a storage burst (Tectonic-style): bytes per parameter, burst and tiered
  writes, HDD seeks and aggregation.
"""

from mlsys_lab.fault_tolerance.reliability import (
    cluster_mttf,
    daly_interval,
    expected_failures,
    expected_goodput,
    first_order_goodput,
    goodput_at_optimum,
    optimal_interval,
    probability_no_failure,
    product_goodput,
    restart_budget,
    young_daly_interval,
)
from mlsys_lab.fault_tolerance.simulate import simulate_elastic, simulate_goodput, simulate_job
from mlsys_lab.fault_tolerance.storage import (
    burst_write_seconds,
    checkpoint_bytes,
    checkpoint_bytes_per_gpu,
    tiered_checkpoint,
)

__all__ = [
    "burst_write_seconds", "checkpoint_bytes", "checkpoint_bytes_per_gpu", "cluster_mttf", "daly_interval",
    "expected_failures", "expected_goodput", "first_order_goodput", "goodput_at_optimum", "optimal_interval",
    "probability_no_failure", "product_goodput", "restart_budget", "simulate_elastic", "simulate_goodput",
    "simulate_job", "tiered_checkpoint", "young_daly_interval",
]
