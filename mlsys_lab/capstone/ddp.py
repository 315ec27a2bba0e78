"""Data parallelism with DDP's gradient buckets: each bucket all-reduced while the backward still runs.

PyTorch's DistributedDataParallel (its *Reducer*; Li et al. 2020, "PyTorch Distributed", VLDB, §3.2) does not wait
for the whole gradient: it groups the parameters into buckets in the reverse order of the forward (roughly the
order the backward produces their gradients), and as soon as every gradient of a bucket is ready it starts that
bucket's all-reduce on a communication stream, while the backward goes on computing the earlier layers. The
buckets trade latency against overlap: one bucket per layer pays α per message and per layer; one bucket for
everything overlaps nothing. DDP's defaults are a 1 MiB first bucket (so the first all-reduce starts early) and
25 MiB after it.

Here the capstone's model is cut into "layers", each one contiguous slice of the flat gradient (:func:`grad_layers`):
the embeddings, block 0 … L−1, and the head with the final layer norm. The backward produces them in the reverse
order, and :func:`bucketed_backward` runs it layer by layer with the model's own stage functions (the same
arithmetic as ``loss_and_grad``: the gradient is the same bit for bit), timing each layer. The plan is lesson 08's
``ddp_schedule`` (the learner's, else :func:`~mlsys_lab.parallelism.dp.ddp_bucket_schedule`), fed with those measured
seconds, each layer's bytes, the caps below and lesson 07's α-β fit of this machine (:func:`fitted_allreduce`).
:func:`checked_plan` refuses a plan that cannot run, naming ``ddp_schedule``. :func:`ddp_step` executes it: a
communication thread per rank all-reduces each bucket (the ring piece through ``MpiGroup``) the moment its last
layer's backward ends, weighting the rank's gradient by its tokens and dividing the sum by the total, exactly as
``average_gradients`` does, so the result equals the unbucketed run's (on 2 ranks bit for bit: a + b = b + a).

The caps. The default model's gradient is about 450 KB: under PyTorch's 25 MiB everything is one bucket and
nothing overlaps. Scaled to this model, 64 KiB first and 128 KiB after: a block (≈ 200 KB in float32) fills a bucket
alone, so each block's all-reduce overlaps the backward of the block before it, and on this machine a 2-rank ring
message spends as long in latency as in bandwidth at 2α/β ≈ 73 KB: well below that, α dominates.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np

from mlsys_lab import records
from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    embed,
    embed_back,
    head_loss_and_back,
    param_layout,
    transformer_block,
    transformer_block_back,
    views,
)
from mlsys_lab.collectives.cost import allreduce_time
from mlsys_lab.parallelism.dp import ddp_bucket_schedule
from mlsys_lab.validation import check_array, check_finite, check_index_array, check_int, check_type

FIRST_BUCKET_BYTES = 64 * 1024   # PyTorch: 1 MiB (the module docstring says why these are smaller)
BUCKET_CAP_BYTES = 128 * 1024    # PyTorch: 25 MiB


def grad_layers(config: GPTConfig) -> list[tuple[str, slice]]:
    """(name, slice of θ) of every layer in forward order: "embeddings", "h0" … "h{L-1}", "head" (LNf + head.w).
    The schedule's layer i is entry i; the backward makes them ready last to first."""
    check_type("config", config, GPTConfig)
    groups: dict[str, list[int]] = {}
    start = 0
    for name, shape in param_layout(config):
        key = "embeddings" if name in ("wte", "wpe") else "head" if name.startswith(("lnf.", "head.")) else \
            name.split(".", 1)[0]
        size = int(np.prod(shape))
        groups.setdefault(key, [start, start])[1] = start + size
        start += size
    return [(key, slice(lo, hi)) for key, (lo, hi) in groups.items()]


def grad_layer_bytes(config: GPTConfig) -> list[int]:
    """Bytes of each layer's gradient slice, in :func:`grad_layers` order (θ's dtype)."""
    itemsize = np.dtype(check_type("config", config, GPTConfig).dtype).itemsize
    return [(part.stop - part.start) * itemsize for _, part in grad_layers(config)]


def bucketed_backward(theta: np.ndarray, idx: np.ndarray, targets: np.ndarray, config: GPTConfig, ops: ModelOps,
                      on_ready: Callable[[int], None] | None = None, out: np.ndarray | None = None):
    """``loss_and_grad``'s loss and gradient, the backward run one layer at a time: (loss, grad, seconds) with
    ``seconds[i]`` = (start, end) of layer i's backward (``perf_counter``; the head's includes the loss). After each
    layer ``on_ready(i)`` is called: its slice of ``grad`` is final from then on. ``out``: a zeroed buffer shaped
    like θ to write the gradient into (what a communication thread reads while the backward goes on)."""
    check_type("ops", ops, ModelOps)
    if on_ready is not None and not callable(on_ready):
        raise TypeError(f"on_ready must be a function of the layer's index; got {type(on_ready).__name__}")
    check_type("config", config, GPTConfig)
    for name, ids in (("idx", idx), ("targets", targets)):
        check_index_array(name, check_array(name, ids, ndim=2, kinds="iu"), config.vocab_size, of_name="characters")
    if np.shape(targets) != np.shape(idx) or np.shape(idx)[1] > config.context:
        raise ValueError(f"idx and targets must have one shape (B, T ≤ context={config.context}); got "
                         f"{np.shape(idx)} and {np.shape(targets)}")
    n = len(grad_layers(config))
    w = views(theta, config)
    x, cache = embed(w, idx), []
    for layer in range(config.n_layers):
        x, block_cache = transformer_block(x, w, layer, config, ops)
        cache.append(block_cache)
    grad = np.zeros_like(theta) if out is None else check_array("out", out, shape=theta.shape)
    if grad.dtype != theta.dtype:
        raise TypeError(f"out must have theta's dtype {theta.dtype}; got {grad.dtype}")
    g, seconds = views(grad, config), [(0.0, 0.0)] * n

    def done(i: int, start: float) -> None:
        seconds[i] = (start, time.perf_counter())
        if on_ready is not None:
            on_ready(i)

    tick = time.perf_counter()
    losses, dx = head_loss_and_back(x, targets, w, g, ops, dtype=theta.dtype)
    done(n - 1, tick)
    for layer in reversed(range(config.n_layers)):
        tick = time.perf_counter()
        dx = transformer_block_back(dx, cache[layer], w, g, layer, config, ops)
        done(layer + 1, tick)
    tick = time.perf_counter()
    embed_back(dx, idx, g)
    done(0, tick)
    return float(np.mean(losses)), grad, seconds


def fitted_allreduce(n_ranks: int) -> Callable[[float], float]:
    """``allreduce_seconds(n_bytes)`` of the ring on ``n_ranks`` from lesson 07's α-β fit of this machine
    (``collectives_mpi_cpu``: the fit of that many ranks, else of 2; α and β are the link's)."""
    check_int("n_ranks", n_ranks, low=1, high=4096)
    runs = records.load("collectives_mpi_cpu")["runs"]
    fit = next((r for r in runs if r["n_ranks"] == n_ranks), next(r for r in runs if r["n_ranks"] == 2))["ring_fit"]
    alpha, beta = fit["alpha_seconds"], fit["beta_seconds_per_byte"]
    return lambda n_bytes: float(allreduce_time("ring", float(n_bytes), n_ranks, alpha, beta))


def _plan_problem(plan, ready: dict[int, float], n: int) -> str | None:
    if not isinstance(plan, (list, tuple)) or not plan:
        return f"it must return a list of (layers, start_s, end_s), one per bucket; got {type(plan).__name__}"
    try:
        rows = [([int(i) for i in layers], float(start), float(end)) for layers, start, end in plan]
    except (TypeError, ValueError):
        return "every bucket must be (list of layer indices, start_s, end_s)"
    held = sorted(i for layers, _, _ in rows for i in layers)
    if held != list(range(n)):
        return f"the buckets must hold every layer 0 … {n - 1} exactly once; they hold {held}"
    tol, free = 1e-9 * max(ready.values()) + 1e-12, 0.0
    for b, (layers, start, end) in enumerate(rows):
        if layers != list(range(layers[0], layers[0] - len(layers), -1)):
            return (f"bucket {b} holds layers {layers}: a bucket is adjacent layers in ready order (last first), "
                    "one contiguous slice of the gradient")
        if start < ready[layers[-1]] - tol:
            return (f"bucket {b} (layers {layers}) starts at {start:.6g} s, before layer {layers[-1]}'s gradient "
                    f"is ready at {ready[layers[-1]]:.6g} s")
        if start < free - tol or end < start:
            return f"bucket {b} runs {start:.6g} … {end:.6g} s; the previous all-reduce runs until {free:.6g} s"
        free = end
    return None


def checked_plan(schedule: Callable, layer_seconds, layer_bytes, allreduce_seconds: Callable,
                 first_bucket_bytes: float = FIRST_BUCKET_BYTES, bucket_cap_bytes: float = BUCKET_CAP_BYTES):
    """``schedule(layer_seconds, layer_bytes, first, cap, allreduce_seconds)`` as [(layers, start_s, end_s)],
    validated: every layer once, each bucket adjacent layers in ready order, no all-reduce before its gradients
    are ready or while the previous one runs. A ValueError names whose ``ddp_schedule`` cannot run, and why."""
    if not callable(schedule) or not callable(allreduce_seconds):
        raise TypeError("schedule and allreduce_seconds must be functions (ddp_schedule, n_bytes -> seconds)")
    check_finite("first_bucket_bytes", first_bucket_bytes, low=0)
    check_finite("bucket_cap_bytes", bucket_cap_bytes, low=0)
    seconds = [float(s) for s in check_array("layer_seconds", layer_seconds, ndim=1, finite=True, min_size=1)]
    sizes = [int(b) for b in check_array("layer_bytes", layer_bytes, ndim=1, finite=True)]
    if len(sizes) != len(seconds) or min(seconds) < 0 or min(sizes) < 0:
        raise ValueError("layer_seconds and layer_bytes must hold one number ≥ 0 per layer each")
    ready = dict(zip(range(len(seconds) - 1, -1, -1), np.cumsum(seconds[::-1]).tolist(), strict=True))
    plan = schedule(seconds, sizes, first_bucket_bytes, bucket_cap_bytes, allreduce_seconds)
    problem = _plan_problem(plan, ready, len(seconds))
    if problem is not None:
        whose = "the course's" if schedule is ddp_bucket_schedule else "your"
        raise ValueError(f"{whose} ddp_schedule ({len(seconds)} layers, caps {first_bucket_bytes:g}/"
                         f"{bucket_cap_bytes:g} bytes) cannot run: {problem}")
    return [([int(i) for i in layers], float(start), float(end)) for layers, start, end in plan]


def measure_layer_seconds(theta, idx, targets, config: GPTConfig, ops: ModelOps, repeats: int = 2) -> list[float]:
    """Each layer's backward seconds, the minimum over ``repeats`` bucketed backwards (the first call warms up)."""
    runs = [bucketed_backward(theta, idx, targets, config, ops)[2] for _ in range(check_int("repeats", repeats,
                                                                                             low=1, high=100))]
    return [min(run[i][1] - run[i][0] for run in runs) for i in range(len(runs[0]))]


def ddp_step(theta, idx, targets, config: GPTConfig, ops: ModelOps, plan, group, own_tokens: int,
             total_tokens: int, overlap: bool = True):
    """One rank's step: the bucketed backward, each bucket of ``plan`` all-reduced by ``group`` (an ``MpiGroup``)
    on a communication thread as soon as its last layer is done (``overlap``; else all after the backward, on this
    thread). Returns (loss, averaged gradient, timeline): the timeline's ``layers`` and ``buckets`` are
    [label, start_s, end_s] from the step's start. Only the communication thread calls MPI until it is joined."""
    layers = grad_layers(config)
    origin = time.perf_counter()
    grad, averaged = np.zeros_like(theta), np.empty_like(theta)
    ready = [threading.Event() for _ in plan]
    last_of = {members[-1]: b for b, (members, _, _) in enumerate(plan)}
    comm_rows: list = []
    failure: list = []

    def communicate() -> None:
        try:
            for b, (members, _, _) in enumerate(plan):
                ready[b].wait()
                if failure:
                    return
                part = slice(layers[members[-1]][1].start, layers[members[0]][1].stop)  # ready order: last first
                tick = time.perf_counter()
                summed = group.all_reduce([grad[part] * int(own_tokens)] * group.n_ranks)[group.rank]
                averaged[part] = summed / total_tokens
                names = ",".join(layers[i][0] for i in members)
                comm_rows.append([f"b{b}: {names}", tick - origin, time.perf_counter() - origin])
        except BaseException as exc:  # handed to the main thread, which raises it
            failure.append(exc)

    def on_ready(i: int) -> None:
        if overlap and i in last_of:
            ready[last_of[i]].set()

    thread = threading.Thread(target=communicate, name="ddp-comm", daemon=True)
    if overlap:
        thread.start()
    try:
        loss, _, seconds = bucketed_backward(theta, idx, targets, config, ops, on_ready, out=grad)
    except BaseException as exc:
        failure.append(exc)
        for event in ready:  # the thread stops at its next bucket; the caller's failure ends the MPI job
            event.set()
        raise
    if overlap:
        thread.join()
    else:
        for event in ready:
            event.set()
        communicate()
    if failure:
        raise failure[0]
    order = sorted(range(len(seconds)), key=lambda i: seconds[i][0])
    timeline = {"layers": [[layers[i][0], seconds[i][0] - origin, seconds[i][1] - origin] for i in order],
                "buckets": comm_rows}
    return loss, averaged, timeline
