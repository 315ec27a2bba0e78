"""Data parallelism (DP / PyTorch DDP): replicate the model, partition the batch, all-reduce gradients.

Each of ``n`` ranks holds a full replica (the notes' *replication*) and a slice of ``b/n`` samples
(*partitioning*). With the loss a mean over samples and equal slices, the full-batch gradient is
the mean of the local ones:

    ∇L(θ) = (1/n) Σ_r ∇L_r(θ)          one all-reduce of Ψ gradient elements per step

PyTorch DDP (Li et al., VLDB 2020) groups gradients into ~25 MB *buckets* and starts a bucket's
all-reduce as soon as backward has produced it, overlapping communication with the rest of
backward; :func:`ddp_timeline` shows that overlap (lesson 07's bucket simulation) as timeline events.
"""

from __future__ import annotations

from mlsys_lab.collectives.overlap import bucketed_timeline
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import _check_blocks, loss_and_grads
from mlsys_lab.parallelism.timeline import Event
from mlsys_lab.validation import check_array, check_bool, check_finite, check_int, check_number, check_positive


def data_parallel_grads(x, target, blocks: list[dict], head_dim: int, n_ranks: int,
                        log: comm.CommLog | None = None):
    """Loss and gradients of a DP step over ``n_ranks`` simulated ranks.

    x, target: (b, s, d) with ``n_ranks`` dividing b. Returns (mean loss, gradients of rank 0),
    which after the all-reduce are the same on every rank and equal the single-device ones.
    """
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    n_ranks = check_int("n_ranks", n_ranks, low=1)
    if x.shape[0] % n_ranks:
        raise ValueError(f"n_ranks must divide the batch size {x.shape[0]}; got {n_ranks}")
    xs, ts = comm.partition(x, n_ranks), comm.partition(target, n_ranks)   # n × (b/n, s, d)
    replicas = [blocks for _ in range(n_ranks)]  # replicated: every rank reads the same weights
    local = [loss_and_grads(xs[r], ts[r], replicas[r], head_dim) for r in range(n_ranks)]
    grads = []
    for i, block in enumerate(blocks):
        reduced = {}
        for name in block:
            summed = comm.all_reduce([local[r][1][i][name] for r in range(n_ranks)], log)
            reduced[name] = summed[0] / n_ranks
        grads.append(reduced)
    loss = sum(loss_r for loss_r, _ in local) / n_ranks
    return loss, grads


def ddp_timeline(layer_backward_seconds, layer_grad_bytes, bucket_bytes: float, n_ranks: int,
                 bandwidth_bytes_per_s: float, latency_s: float = 5e-6, overlap: bool = True) -> list[Event]:
    """Backward pass with bucketed gradient all-reduce (DDP), as events on two streams.

    The simulation is lesson 07's :func:`mlsys_lab.collectives.overlap.bucketed_timeline` (α = ``latency_s``,
    β = 1/``bandwidth_bytes_per_s``): backward visits layers last to first; layer i's gradient
    (``layer_grad_bytes[i]``) is ready when its backward (``layer_backward_seconds[i]``) ends and fills
    the current bucket; a full bucket (or the last one) is ring-all-reduced on the "comm" stream, one
    bucket at a time. With ``overlap=False`` every all-reduce waits for the end of backward.
    Returns one :class:`Event` per layer's backward ("compute") and per bucket ("comm").
    """
    check_array("layer_backward_seconds", layer_backward_seconds, ndim=1, finite=True)
    check_array("layer_grad_bytes", layer_grad_bytes, ndim=1, finite=True)
    check_finite("latency_s", latency_s, low=0.0)
    check_bool("overlap", overlap)
    bandwidth_bytes_per_s = check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    latency_s = check_number("latency_s", latency_s, low=0.0)
    timeline = bucketed_timeline(layer_backward_seconds, layer_grad_bytes, bucket_bytes, n_ranks,
                                 alpha=latency_s, beta=1 / bandwidth_bytes_per_s, overlap=overlap)
    events = [Event("compute", start, end, f"bwd L{layer}", "backward") for start, end, layer in timeline.compute]
    for (start, end, _), layers in zip(timeline.comm, timeline.buckets, strict=True):
        events.append(Event("comm", start, end, "all-reduce " + ",".join(f"L{i}" for i in layers), "all_reduce"))
    return events


def ddp_bucket_schedule(layer_backward_s, layer_grad_bytes, first_bucket_bytes, bucket_cap_bytes, allreduce_seconds):
    """DDP's bucket plan (Li et al. 2020, §3.2): per bucket in issue order, (its layers in ready order, start_s, end_s).

    Backward order (last layer first); a gradient is ready when its layer's backward ends. The first bucket
    closes once it holds ≥ ``first_bucket_bytes``, later ones at ≥ ``bucket_cap_bytes``; a bucket's all-reduce
    starts when its last gradient is ready and the previous all-reduce is done (one communication stream), and
    lasts ``allreduce_seconds(its bytes)``. The answer of lesson 08's ``ddp_schedule`` exercise; the capstone
    runs it (or the learner's) on real ranks (:mod:`mlsys_lab.capstone.ddp`)."""
    times = check_array("layer_backward_s", layer_backward_s, ndim=1, finite=True)
    sizes = check_array("layer_grad_bytes", layer_grad_bytes, ndim=1, finite=True)
    if sizes.shape != times.shape or times.min() < 0 or sizes.min() < 0:
        raise ValueError(f"layer_backward_s and layer_grad_bytes must hold one number ≥ 0 per layer each; got "
                         f"{times.size} and {sizes.size} numbers, smallest {times.min():g} and {sizes.min():g}")
    check_finite("first_bucket_bytes", first_bucket_bytes, low=0)
    check_finite("bucket_cap_bytes", bucket_cap_bytes, low=0)
    if not callable(allreduce_seconds):
        raise TypeError(f"allreduce_seconds must be a function n_bytes -> seconds; got "
                        f"{type(allreduce_seconds).__name__}")
    ready, clock, buckets, current, filled = {}, 0.0, [], [], 0.0
    for layer in reversed(range(len(layer_backward_s))):
        clock += layer_backward_s[layer]
        ready[layer] = clock
        current.append(layer)
        filled += layer_grad_bytes[layer]
        if filled >= (first_bucket_bytes if not buckets else bucket_cap_bytes):
            buckets.append((current, filled))
            current, filled = [], 0.0
    if current:
        buckets.append((current, filled))
    schedule, free = [], 0.0
    for layers, n_bytes in buckets:
        start = max(ready[layers[-1]], free)
        free = start + allreduce_seconds(n_bytes)
        schedule.append((layers, start, free))
    return schedule
