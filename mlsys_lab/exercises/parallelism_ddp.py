"""The check of exercise 6.6 of 08_parallelism: DDP's bucketed all-reduce, scheduled under the backward.

The learner's ``ddp_schedule`` gets the layers' backward times and gradient sizes, DDP's two bucket caps and
``allreduce_seconds``, a cost function that stays on the checking side (its α and β are drawn per case and never
shown), and returns, per bucket in the order issued, (its layers, start, end). The check runs that schedule on
one communication stream: every layer in exactly one bucket, buckets cut where DDP cuts them, no all-reduce
started before its last gradient is ready or while the previous one still runs, each as long as the cost function
says, and each started as early as those rules allow (the step no longer than the reference's).
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.parallelism.dp import ddp_bucket_schedule as reference_ddp_schedule


class AllreduceCost:
    """Seconds of a ring all-reduce of ``n_bytes`` over ``n_ranks``: α·2(p−1) + 2(p−1)/p·n·β (α, β private)."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"__call__"})

    def __init__(self, alpha: float, beta: float, n_ranks: int) -> None:
        self._alpha, self._beta, self._p = float(alpha), float(beta), int(n_ranks)
        self.calls = 0

    def __call__(self, n_bytes) -> float:
        self.calls += 1
        n = float(n_bytes)
        if not np.isfinite(n) or n < 0:
            raise ValueError(f"allreduce_seconds: n_bytes must be a finite number ≥ 0; got {n_bytes!r}")
        p = self._p
        return 2 * (p - 1) * self._alpha + 2 * (p - 1) / p * n * self._beta


def _schedule_problem(got, times, sizes, first_cap, cap, cost: AllreduceCost) -> str | None:
    expected = reference_ddp_schedule(times, sizes, first_cap, cap, cost)
    if not isinstance(got, (list, tuple)) or not got:
        return f"return a list of (layers, start_s, end_s), one per bucket; got {type(got).__name__}"
    try:
        rows = [([int(layer) for layer in layers], float(start), float(end)) for layers, start, end in got]
    except (TypeError, ValueError):
        return "every bucket must be (list of layer indices, start_s, end_s)"
    order = [layer for layers, _, _ in rows for layer in layers]
    backward = list(reversed(range(len(times))))
    if sorted(order) != sorted(backward):
        return f"the buckets must hold every layer 0 … {len(times) - 1} exactly once; they hold {order}"
    ready = dict(zip(backward, np.cumsum([times[i] for i in backward]), strict=True))
    free = 0.0
    for b, (layers, start, end) in enumerate(rows):
        last = max(layers, key=lambda layer: ready[layer])
        if start < ready[last] - 1e-12:
            return (f"bucket {b} (layers {layers}) starts at {start:.6g} s, before layer {last}'s gradient is ready "
                    f"at {ready[last]:.6g} s")
        if start < free - 1e-12:
            return f"bucket {b} starts at {start:.6g} s while the previous all-reduce runs until {free:.6g} s"
        seconds = cost(sum(sizes[layer] for layer in layers))
        if not np.isclose(end - start, seconds, rtol=1e-9, atol=1e-15):
            return f"bucket {b} lasts {end - start:.6g} s; allreduce_seconds of its bytes is {seconds:.6g} s"
        free = end
    cuts = [layers for layers, _, _ in expected]
    if [layers for layers, _, _ in rows] != cuts:
        return (f"buckets {[layers for layers, _, _ in rows]}; DDP's are {cuts} (backward order; the first closes at "
                f"≥ {first_cap:g} bytes, the others at ≥ {cap:g})")
    for b, ((_, start, _), (_, due, _)) in enumerate(zip(rows, expected, strict=True)):
        if start > due + 1e-12:
            return (f"bucket {b} starts at {start:.6g} s; it can start at {due:.6g} s "
                    "(its gradients ready, the stream free)")
    return None


def check_ddp_schedule(fn: Callable) -> None:
    """``fn(layer_backward_s, layer_grad_bytes, first_bucket_bytes, bucket_cap_bytes, allreduce_seconds)`` -> per
    bucket in issue order, (layers in ready order, start_s, end_s); run on one communication stream."""
    g = rng()
    fixed = [("example: 4 layers", [1.0, 1.0, 1.0, 1.0], [4, 4, 4, 4], 4, 8),
             ("a bucket lands exactly on its cap", [0.5, 2.0, 1.0, 0.25, 1.0], [3, 5, 2, 6, 1], 1, 8),
             ("one gradient larger than the cap", [1.0, 3.0, 1.0], [2, 40, 3], 2, 10),
             ("one layer", [2.0], [7], 1, 4),
             ("everything in the first bucket", [1.0, 1.0, 1.0], [1, 1, 1], 10, 20),
             ("slow network: all-reduces queue up", [0.1] * 6, [5] * 6, 5, 10)]
    cases = []
    for label, times, sizes, first_cap, cap in fixed:
        alpha = 10.0 if "slow" in label else float(g.uniform(0.01, 0.2))
        cost = AllreduceCost(alpha, float(g.uniform(0.005, 0.05)), int(g.integers(2, 9)))
        cases.append(Case(label, (times, sizes, first_cap, cap, cost), expected=None,
                          check_result=lambda got, a=(times, sizes, first_cap, cap, cost): _schedule_problem(got, *a)))
    for _ in range(8):
        n_layers = int(g.integers(2, 25))
        times = [float(t) for t in g.uniform(0.1, 2.0, size=n_layers)]
        sizes = [int(s) for s in g.integers(1, 40, size=n_layers)]
        first_cap, cap = int(g.integers(1, 30)), int(g.integers(20, 100))
        ready_order = sizes[::-1]
        first_end = next((j for j in range(n_layers) if sum(ready_order[:j + 1]) >= first_cap), n_layers - 1)
        if g.random() < 0.5 and first_end < n_layers - 1:         # the second bucket lands exactly on the cap
            cap = int(sum(ready_order[first_end + 1:first_end + 1 + int(g.integers(1, 4))]))
        cost = AllreduceCost(float(g.uniform(0.0, 0.3)), float(g.uniform(0.001, 0.1)), int(g.integers(2, 65)))
        label = f"{n_layers} layers, caps {first_cap}/{cap} bytes"
        cases.append(Case(label, (times, sizes, first_cap, cap, cost), expected=None,
                          check_result=lambda got, a=(times, sizes, first_cap, cap, cost): _schedule_problem(got, *a)))
    check("ddp_schedule", fn, cases, compare=lambda got, expected: True)
