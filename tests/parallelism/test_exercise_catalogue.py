"""The checks of 08_parallelism reject plausible wrong answers on every seed and pass the references."""

from __future__ import annotations

import math

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.collectives.overlap import make_buckets
from mlsys_lab.exercises.parallelism import (
    check_ddp_schedule,
    check_fsdp_step,
    check_microbatches_for_bubble,
    check_one_f_one_b,
    check_tp_mlp,
    check_zero_memory,
    reference_zero_peak,
)
from mlsys_lab.exercises.parallelism_ddp import reference_ddp_schedule
from mlsys_lab.exercises.parallelism_fsdp import reference_fsdp_step
from mlsys_lab.nn import gelu, mse_loss
from mlsys_lab.parallelism.fsdp import layer_backward, layer_forward
from mlsys_lab.parallelism.model import mlp
from mlsys_lab.parallelism.pp import pipeline_bubble_fraction, schedule_ops
from mlsys_lab.parallelism.zero import zero_memory_per_gpu


# ---------------------------------------------------------------- zero_memory
def zero_peak(layer_sizes, n_gpus, stage, ceil=True, transient="both", largest=True, extra_own=False,
              pad_whole=False, every_stage=False):
    shards = [(-(-s // n_gpus) if ceil else s // n_gpus) for s in layer_sizes]
    full, own = sum(layer_sizes), (-(-sum(layer_sizes) // n_gpus) if pad_whole else sum(shards))
    total = 2 * (own if stage >= 3 else full) + 2 * (own if stage >= 2 else full) + 12 * (own if stage >= 1 else full)
    layer = max(shards) if largest else shards[-1]
    extra = (n_gpus - (0 if extra_own else 1)) * layer
    count = {"both": (stage >= 2) + (stage >= 3), "weights only": stage >= 3, "grads only": stage >= 2}[transient]
    return total + 2 * extra * (2 if every_stage else count)


ZERO_WRONG = {
    "the paper's formula (no padding, no gathered layer)": lambda sizes, n, stage: zero_memory_per_gpu(
        sum(sizes), n, stage),
    "shards by floor division (drops the padding)": lambda sizes, n, stage: zero_peak(sizes, n, stage, ceil=False),
    "pads the whole model once, not each layer": lambda sizes, n, stage: zero_peak(sizes, n, stage, pad_whole=True),
    "the gathered layer is the last one, not the largest": lambda sizes, n, stage: zero_peak(
        sizes, n, stage, largest=False),
    "stage 3 gathers weights but the full gradient is never held": lambda sizes, n, stage: zero_peak(
        sizes, n, stage, transient="weights only"),
    "stage 3 forgets the gathered weights": lambda sizes, n, stage: zero_peak(sizes, n, stage, transient="grads only"),
    "counts the own shard twice in the gathered layer": lambda sizes, n, stage: zero_peak(
        sizes, n, stage, extra_own=True),
    "a gathered layer at every stage": lambda sizes, n, stage: zero_peak(sizes, n, stage, every_stage=True),
}


# ---------------------------------------------------------------- microbatches_for_bubble
def mb_reference(n_stages, max_bubble, schedule, n_chunks):
    step = n_stages if schedule == "interleaved" and n_chunks > 1 else 1
    m = step
    while pipeline_bubble_fraction(n_stages, m, schedule, n_chunks) > max_bubble:
        m += step
    return m


def mb_closed_form(n_stages, max_bubble, schedule, n_chunks):
    """(p−1)(1−b)/b: one too high where float rounding lands just above an integer (p=4, 20% gives 13)."""
    v = n_chunks if schedule == "interleaved" else 1
    m = max(1, math.ceil((n_stages - 1) * (1 - max_bubble) / max_bubble / v)) if max_bubble > 0 else 1
    step = n_stages if schedule == "interleaved" and v > 1 else 1
    return -(-m // step) * step


def mb_loop(n_stages, max_bubble, schedule, n_chunks, step_rule="interleaved", formula="share", strict=False,
            chunks=True):
    v = n_chunks if (schedule == "interleaved" and chunks) else 1
    step = {"interleaved": n_stages if schedule == "interleaved" and n_chunks > 1 else 1, "none": 1,
            "always": n_stages}[step_rule]
    m = step

    def bubble(m):
        if formula == "share":
            return (n_stages - 1) / (v * m + n_stages - 1)
        return (n_stages - 1) / (v * m)

    while (bubble(m) >= max_bubble) if strict else (bubble(m) > max_bubble):
        if n_stages == 1 and strict:
            break
        m += step
    return m


MB_WRONG = {
    "closed form (p−1)(1−b)/b rounded up in floats": mb_closed_form,
    "ignores the multiple-of-p rule": lambda p, b, s, v: mb_loop(p, b, s, v, step_rule="none"),
    "multiple of p for every schedule": lambda p, b, s, v: mb_loop(p, b, s, v, step_rule="always"),
    "ignores n_chunks (interleaved as 1F1B)": lambda p, b, s, v: mb_loop(p, b, s, v, chunks=False),
    "Megatron's (p−1)/m instead of the share of the total": lambda p, b, s, v: mb_loop(p, b, s, v, formula="ratio"),
    "strict inequality (one too many on the bound)": lambda p, b, s, v: mb_loop(p, b, s, v, strict=True),
}


# ---------------------------------------------------------------- tp_mlp
def tp_reference(x, w1, w2, n_ranks, group):
    f = w1.shape[1] // n_ranks
    partials = [mlp(x, w1[:, r * f:(r + 1) * f], w2[r * f:(r + 1) * f, :])[0] for r in range(n_ranks)]
    return group.all_reduce(partials)


def tp_no_partition(x, w1, w2, n_ranks, group):
    """Rank 0 computes everything, the others contribute zeros: the right sum, no split at all."""
    full = mlp(x, w1, w2)[0]
    return group.all_reduce([full] + [np.zeros_like(full)] * (n_ranks - 1))


def tp_averaged(x, w1, w2, n_ranks, group):
    full = mlp(x, w1, w2)[0]
    return group.all_reduce([full / n_ranks] * n_ranks)


def tp_gelu_after_sum(x, w1, w2, n_ranks, group):
    f = w1.shape[1] // n_ranks
    partials = [(x @ w1[:, r * f:(r + 1) * f]) @ w2[r * f:(r + 1) * f, :] for r in range(n_ranks)]
    return [gelu(out) for out in group.all_reduce(partials)]


def tp_gather_weights(x, w1, w2, n_ranks, group):
    f = w1.shape[1] // n_ranks
    w1_full = group.all_gather([w1[:, r * f:(r + 1) * f] for r in range(n_ranks)], axis=1)
    return [mlp(x, w, w2)[0] for w in w1_full]


def tp_no_collective(x, w1, w2, n_ranks, group):
    return [mlp(x, w1, w2)[0] for _ in range(n_ranks)]


def tp_partials_only(x, w1, w2, n_ranks, group):
    f = w1.shape[1] // n_ranks
    return [mlp(x, w1[:, r * f:(r + 1) * f], w2[r * f:(r + 1) * f, :])[0] for r in range(n_ranks)]


def tp_two_all_reduces(x, w1, w2, n_ranks, group):
    """All-reduces the hidden activations too (the f in Megatron's backward is not in the forward)."""
    f = w1.shape[1] // n_ranks
    hidden = group.all_reduce([x @ w1[:, r * f:(r + 1) * f] @ np.zeros((f, f)) + 0 for r in range(n_ranks)])
    del hidden
    return tp_reference(x, w1, w2, n_ranks, group)


TP_WRONG = {
    "no partitioning: rank 0 computes it all, the others send zeros": tp_no_partition,
    "every rank computes the full MLP and all-reduces a p-th of it": tp_averaged,
    "GeLU after the all-reduce (GeLU(Σ) ≠ Σ GeLU)": tp_gelu_after_sum,
    "gathers W1 instead of splitting the work": tp_gather_weights,
    "no communication, replicated computation": tp_no_collective,
    "returns the partials without summing them": tp_partials_only,
    "an extra all-reduce": tp_two_all_reduces,
}


# ---------------------------------------------------------------- one_f_one_b
def ofob_reference(n_stages, n_microbatches):
    orders = []
    for d in range(n_stages):
        warmup = min(n_stages - d - 1, n_microbatches)
        ops = [("F", i) for i in range(warmup)]
        for i in range(n_microbatches - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", i) for i in range(n_microbatches - warmup, n_microbatches)]
        orders.append(ops)
    return orders


def ofob_warmup(n_stages, n_microbatches, warmup_of):
    orders = []
    for d in range(n_stages):
        warmup = max(0, min(warmup_of(n_stages, d), n_microbatches))
        ops = [("F", i) for i in range(warmup)]
        for i in range(n_microbatches - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", i) for i in range(n_microbatches - warmup, n_microbatches)]
        orders.append(ops)
    return orders


def ofob_uncapped(n_stages, n_microbatches):
    """p − d − 1 warm-up forwards even when there are fewer micro-batches (ops beyond m)."""
    orders = []
    for d in range(n_stages):
        warmup = n_stages - d - 1
        ops = [("F", i) for i in range(warmup)]
        for i in range(max(0, n_microbatches - warmup)):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", i) for i in range(max(0, n_microbatches - warmup), n_microbatches)]
        orders.append(ops)
    return orders


def ofob_backward_first(n_stages, n_microbatches):
    """Alternates B then F (the backward of a micro-batch before its forward on the last stage)."""
    orders = ofob_reference(n_stages, n_microbatches)
    return [[op for pair in zip(ops[1::2], ops[0::2], strict=False) for op in pair] + ops[len(ops) - len(ops) % 2:]
            for ops in orders]


OFOB_WRONG = {
    "GPipe (all forwards, then all backwards)": lambda p, m: [
        [("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)],
    "p − d warm-up forwards (one too many)": lambda p, m: ofob_warmup(p, m, lambda p, d: p - d),
    "p − d − 2 warm-up forwards (one too few)": lambda p, m: ofob_warmup(p, m, lambda p, d: p - d - 2),
    "p − 1 warm-up forwards on every stage": lambda p, m: ofob_warmup(p, m, lambda p, d: p - 1),
    "d warm-up forwards (the stage index reversed)": lambda p, m: ofob_warmup(p, m, lambda p, d: d),
    "warm-up not capped at m": ofob_uncapped,
    "backward before forward": ofob_backward_first,
    "the library's schedule_ops as Op objects": lambda p, m: schedule_ops(p, m, "1f1b"),
}


# ---------------------------------------------------------------- fsdp_step
def fsdp_variant(xs, ts, shards, shapes, lr, group, upfront=False, free_forward=True, free_backward=True,
                 reduce="reduce_scatter", pad=True, mean=True, local_weights=False, local_grads=False):
    """The reference loop with one thing changed (each keyword names a mistake)."""
    n, n_layers = len(xs), len(shapes)

    def gathered(i):
        full = group.all_gather([shards[r][i] for r in range(n)])
        if local_weights:  # gathers, then rebuilds W from every rank's shard directly
            full = [np.concatenate([shards[q][i] for q in range(n)]) for _ in range(n)]
        size = shapes[i][0] * shapes[i][1]
        return [f[:size].reshape(shapes[i]) for f in full]

    early = [gathered(i) for i in range(n_layers)] if upfront else None
    hs, caches = list(xs), [[None] * n_layers for _ in range(n)]
    for i in range(n_layers):
        w = early[i] if upfront else gathered(i)
        for r in range(n):
            hs[r], caches[r][i] = layer_forward(hs[r], w[r], i == n_layers - 1)
        if free_forward and not upfront:
            group.free(i)
    dys = [mse_loss(hs[r], ts[r])[1] / (n if mean else 1) for r in range(n)]
    new = [[None] * n_layers for _ in range(n)]
    for i in reversed(range(n_layers)):
        w = gathered(i)
        grads = []
        for r in range(n):
            dys[r], dw = layer_backward(dys[r], caches[r][i], w[r])
            padded = np.zeros(n * shards[r][i].size if pad else dw.size)
            padded[:dw.size] = dw.ravel()
            grads.append(padded)
        if free_backward:
            group.free(i)
        if upfront:
            group.free(i)
        k = shards[0][i].size
        if reduce == "all_reduce":   # the full gradient on every rank, then the own slice
            g = [full[r * k:(r + 1) * k] for r, full in enumerate(group.all_reduce(grads))]
        else:
            g = group.reduce_scatter(grads)
        if local_grads:              # calls the collective, then sums the other ranks' gradients itself
            g = [sum(grads)[r * k:(r + 1) * k] for r in range(n)]
        for r in range(n):
            new[r][i] = shards[r][i] - lr * g[r]
    return new


def fsdp_full_copy(xs, ts, shards, shapes, lr, group):
    """All-reduces the gradient and updates the whole gathered copy on every rank, then keeps its slice."""
    n, n_layers = len(xs), len(shapes)
    full_w = []
    for i in range(n_layers):
        full_w.append(group.all_gather([shards[r][i] for r in range(n)]))
    hs, caches = list(xs), [[None] * n_layers for _ in range(n)]
    size = [a * b for a, b in shapes]
    for i in range(n_layers):
        for r in range(n):
            hs[r], caches[r][i] = layer_forward(hs[r], full_w[i][r][:size[i]].reshape(shapes[i]), i == n_layers - 1)
    dys = [mse_loss(hs[r], ts[r])[1] / n for r in range(n)]
    new = [[None] * n_layers for _ in range(n)]
    for i in reversed(range(n_layers)):
        grads = []
        for r in range(n):
            dys[r], dw = layer_backward(dys[r], caches[r][i], full_w[i][r][:size[i]].reshape(shapes[i]))
            grads.append(np.concatenate([dw.ravel(), np.zeros(full_w[i][r].size - size[i])]))
        summed = group.all_reduce(grads)
        k = shards[0][i].size
        for r in range(n):
            updated = full_w[i][r] - lr * summed[r]
            new[r][i] = updated[r * k:(r + 1) * k]
        group.free(i)
    return new


FSDP_WRONG = {
    "gathers every layer up front (and frees them at the end)": lambda *a: fsdp_variant(*a, upfront=True),
    "all-reduces the gradient instead of reduce-scattering it": lambda *a: fsdp_variant(*a, reduce="all_reduce"),
    "never frees a gathered layer": lambda *a: fsdp_variant(*a, free_forward=False, free_backward=False),
    "frees after the backward only (all layers held after the forward)": lambda *a: fsdp_variant(
        *a, free_forward=False),
    "updates the full gathered copy with an all-reduced gradient": fsdp_full_copy,
    "ignores the remainder (the gradient not padded to N·k)": lambda *a: fsdp_variant(*a, pad=False),
    "sums the ranks' gradients instead of averaging them": lambda *a: fsdp_variant(*a, mean=False),
    "computes with the other ranks' shards directly": lambda *a: fsdp_variant(*a, local_weights=True),
    "sums the other ranks' gradients itself": lambda *a: fsdp_variant(*a, local_grads=True),
}


# ---------------------------------------------------------------- ddp_schedule
def ddp_variant(times, sizes, first_cap, cap, cost, forward_order=False, first_bucket=True, never_exceed=False,
                issue="last ready", serialize=True, ready_at="end"):
    """The reference scheduler with one thing changed (each keyword names a mistake)."""
    order = list(range(len(times))) if forward_order else list(reversed(range(len(times))))
    ready, clock, buckets, current, filled = {}, 0.0, [], [], 0.0
    for layer in order:
        ready[layer] = clock if ready_at == "start" else clock + times[layer]
        clock += times[layer]
    for layer in order:
        limit = first_cap if (buckets == [] and first_bucket) else cap
        if never_exceed and current and filled + sizes[layer] > limit:
            buckets.append((current, filled))
            current, filled = [], 0.0
        current.append(layer)
        filled += sizes[layer]
        if filled >= (first_cap if (not buckets and first_bucket) else cap):
            buckets.append((current, filled))
            current, filled = [], 0.0
    if current:
        buckets.append((current, filled))
    schedule, free = [], 0.0
    for layers, n_bytes in buckets:
        at = {"last ready": ready[layers[-1]], "first ready": ready[layers[0]], "after backward": clock}[issue]
        start = max(at, free) if serialize else at
        end = start + cost(n_bytes)
        free = end
        schedule.append((layers, start, end))
    return schedule


def ddp_lesson07_buckets(times, sizes, first_cap, cap, cost):
    """Lesson 07's make_buckets (one cap for every bucket), scheduled correctly."""
    order = list(reversed(range(len(times))))
    ready = dict(zip(order, np.cumsum([times[i] for i in order]), strict=True))
    schedule, free = [], 0.0
    for positions in make_buckets([sizes[i] for i in order], cap):
        layers = [order[j] for j in positions]
        start = max(ready[layers[-1]], free)
        free = start + cost(sum(sizes[i] for i in layers))
        schedule.append((layers, start, free))
    return schedule


def ddp_own_cost(times, sizes, first_cap, cap, cost):
    """Times each all-reduce as bytes / 1 byte per second instead of calling allreduce_seconds."""
    return [(layers, start, start + sum(sizes[i] for i in layers) * 1e-2)
            for layers, start, _ in reference_ddp_schedule(times, sizes, first_cap, cap, cost)]


DDP_WRONG = {
    "one cap for every bucket (lesson 07's make_buckets, no small first bucket)": ddp_lesson07_buckets,
    "never lets a bucket exceed its cap (closes before the overflowing gradient)": lambda *a: ddp_variant(
        *a, never_exceed=True),
    "buckets in forward order (layer 0's gradient first)": lambda *a: ddp_variant(*a, forward_order=True),
    "issues a bucket when its first gradient is ready": lambda *a: ddp_variant(*a, issue="first ready"),
    "issues every bucket after the backward (no overlap)": lambda *a: ddp_variant(*a, issue="after backward"),
    "all-reduces at once on one stream (no queue)": lambda *a: ddp_variant(*a, serialize=False),
    "a gradient ready when its layer's backward starts": lambda *a: ddp_variant(*a, ready_at="start"),
    "its own cost model instead of allreduce_seconds": ddp_own_cost,
}


CATALOGUES = [
    Catalogue("zero_memory", check_zero_memory, reference_zero_peak, ZERO_WRONG),
    Catalogue("microbatches_for_bubble", check_microbatches_for_bubble, mb_reference, MB_WRONG),
    Catalogue("tp_mlp", check_tp_mlp, tp_reference, TP_WRONG),
    Catalogue("one_f_one_b", check_one_f_one_b, ofob_reference, OFOB_WRONG),
    Catalogue("fsdp_step", check_fsdp_step, reference_fsdp_step, FSDP_WRONG),
    Catalogue("ddp_schedule", check_ddp_schedule, reference_ddp_schedule, DDP_WRONG),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
