"""Bucketed gradient all-reduce overlapped with the backward pass (PyTorch DDP), as a timeline.

Backward runs the layers last to first; a layer's gradient is ready when its backward ends. DDP
(Li et al., "PyTorch Distributed", VLDB 2020) packs gradients, in the order they become ready, into
buckets of about ``bucket_bytes`` (default 25 MiB) and starts a bucket's all-reduce as soon as its
last gradient is ready, on one communication stream, while backward goes on. Small buckets start
early but pay α per bucket; one huge bucket waits for the whole backward. Each all-reduce costs the
ring's α-β time (:func:`mlsys_lab.collectives.cost.allreduce_time`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.collectives.cost import allreduce_time
from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_finite,
    check_int,
    check_number,
    check_positive,
    check_type,
)


@dataclass(frozen=True)
class Timeline:
    """When each backward layer and each bucket's all-reduce runs (seconds from the start of backward)."""

    compute: tuple[tuple[float, float, int], ...]  # (start, end, layer), in backward order
    comm: tuple[tuple[float, float, float], ...]  # (start, end, n_bytes) per bucket
    buckets: tuple[tuple[int, ...], ...]  # layer indices in each bucket
    backward_seconds: float
    step_seconds: float  # backward + the communication that sticks out after it

    def __post_init__(self) -> None:
        for name, width in (("compute", 3), ("comm", 3), ("buckets", None)):
            rows = check_type(name, getattr(self, name), (tuple, list))
            if not all(isinstance(r, (tuple, list)) and (width is None or len(r) == width) for r in rows):
                raise TypeError(f"{name} must be a tuple of {'(start, end, ...)' if width else 'index'} tuples")
        check_finite("backward_seconds", self.backward_seconds, low=0.0)
        if check_finite("step_seconds", self.step_seconds, low=0.0) < self.backward_seconds:
            raise ValueError(f"step_seconds must be >= backward_seconds={self.backward_seconds:g} (the step "
                             f"includes the backward); got {self.step_seconds:g}")

    @property
    def exposed_comm_seconds(self) -> float:
        """Communication not hidden behind backward."""
        return self.step_seconds - self.backward_seconds


def make_buckets(grad_bytes_ready_order, bucket_bytes: float) -> list[list[int]]:
    """Greedy buckets in ready order: close a bucket once it holds >= ``bucket_bytes``."""
    check_array("grad_bytes_ready_order", grad_bytes_ready_order, ndim=1, min_size=0, finite=True)
    check_positive("bucket_bytes", bucket_bytes)
    buckets, current, filled = [], [], 0.0
    for position, n_bytes in enumerate(grad_bytes_ready_order):
        current.append(position)
        filled += n_bytes
        if filled >= bucket_bytes:
            buckets.append(current)
            current, filled = [], 0.0
    if current:
        buckets.append(current)
    return buckets


def bucketed_timeline(
    layer_backward_seconds,
    layer_grad_bytes,
    bucket_bytes: float,
    n_ranks: int,
    alpha: float,
    beta: float,
    overlap: bool = True,
) -> Timeline:
    """Simulate one backward pass with bucketed all-reduce.

    ``layer_backward_seconds``, ``layer_grad_bytes``: per layer in *forward* order (layer 0 first);
    backward runs them in reverse. ``overlap=False`` starts all communication after backward ends.
    """
    check_array("layer_backward_seconds", layer_backward_seconds, ndim=1, finite=True)
    check_array("layer_grad_bytes", layer_grad_bytes, ndim=1, finite=True)
    check_bool("overlap", overlap)
    seconds = np.asarray(layer_backward_seconds, dtype=float)
    grad_bytes = np.asarray(layer_grad_bytes, dtype=float)
    if seconds.shape != grad_bytes.shape or seconds.ndim != 1 or seconds.size == 0:
        raise ValueError(
            "layer_backward_seconds and layer_grad_bytes must be equal-length, non-empty 1-D lists"
        )
    if np.any(seconds < 0) or np.any(grad_bytes < 0):
        raise ValueError("layer_backward_seconds and layer_grad_bytes must be >= 0")
    check_int("n_ranks", n_ranks, low=1)
    check_number("alpha", alpha, low=0)
    check_number("beta", beta, low=0)
    order = np.arange(seconds.size)[::-1]  # backward: last layer first
    ends = np.cumsum(seconds[order])
    compute = tuple(
        (float(e - s), float(e), int(layer)) for e, s, layer in zip(ends, seconds[order], order, strict=False)
    )
    positions = make_buckets(grad_bytes[order], bucket_bytes)
    backward = float(ends[-1])
    comm, free_at = [], 0.0
    for bucket in positions:
        ready = float(ends[bucket[-1]]) if overlap else backward
        n_bytes = float(grad_bytes[order][bucket].sum())
        start = max(ready, free_at)
        free_at = start + float(allreduce_time("ring", n_bytes, n_ranks, alpha, beta))
        comm.append((start, free_at, n_bytes))
    buckets = tuple(tuple(int(order[i]) for i in bucket) for bucket in positions)
    return Timeline(compute, tuple(comm), buckets, backward, max(backward, free_at))


def ssp_finish_times(compute_seconds, staleness: int) -> np.ndarray:
    """Finish time of every (step, worker) under stale-synchronous parallel (Ho et al., NeurIPS 2013).

    A worker may start step t once every worker has finished step t − s − 1 (s = ``staleness``;
    s = 0 is bulk-synchronous: everyone waits for the slowest at every step).
    ``compute_seconds``: (steps, workers). Returns the same shape.
    """
    check_array("compute_seconds", compute_seconds, ndim=2)
    compute = np.asarray(compute_seconds, dtype=float)
    if compute.ndim != 2 or compute.size == 0 or np.any(compute < 0):
        raise ValueError(
            f"compute_seconds must be a non-empty (steps, workers) array of times >= 0; got {compute.shape}"
        )
    s = check_int("staleness", staleness, low=0)
    finish = np.zeros_like(compute)
    for t in range(compute.shape[0]):
        own = finish[t - 1] if t else np.zeros(compute.shape[1])
        gate = finish[t - s - 1].max() if t - s - 1 >= 0 else 0.0
        finish[t] = np.maximum(own, gate) + compute[t]
    return finish


def transformer_gradients(
    n_layers: int = 24,
    d_model: int = 1024,
    tokens: int = 8192,
    flop_per_s: float = 400e12,
    grad_bytes_per_param: int = 4,
) -> tuple[np.ndarray, np.ndarray]:
    """Backward seconds and gradient bytes per weight tensor of a plain transformer stack.

    Each layer has four weight matrices, in forward order: QKV (3d²), attention output (d²), MLP up
    (4d²), MLP down (4d²): 12·d² weights. Backward costs about 4 FLOP per weight per token (twice
    the forward's 2) at ``flop_per_s`` sustained. Returns (seconds, bytes), 4·n_layers entries each.
    """
    n_layers = check_int("n_layers", n_layers, low=1, high=512)
    d_model = check_int("d_model", d_model, low=1, high=2**20)
    tokens = check_int("tokens", tokens, low=1)
    check_positive("flop_per_s", flop_per_s)
    grad_bytes_per_param = check_int("grad_bytes_per_param", grad_bytes_per_param, low=1)
    params = np.tile(np.array([3, 1, 4, 4]) * d_model**2, n_layers).astype(float)
    return 4.0 * params * tokens / flop_per_s, params * grad_bytes_per_param
