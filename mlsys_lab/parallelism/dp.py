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
