"""Lesson 07's checks, proved: each reference passes on 50 seeds, each plausible wrong answer fails on all 50."""

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.collectives import cost
from mlsys_lab.exercises import collectives as checks


# --- ring all-reduce ---------------------------------------------------------------------------------
def ring(buffers, net, floor_chunks=False, use_received=True, phases=2):
    p = len(buffers)
    work = [np.array(b, copy=True) for b in buffers]
    if floor_chunks:
        size = len(work[0]) // p
        chunks = [[w[i * size:(i + 1) * size] for i in range(p)] for w in work]
    else:
        chunks = [np.array_split(w, p) for w in work]
    for step in range(p - 1):
        messages = [(r, (r + 1) % p, chunks[r][(r - step) % p]) for r in range(p)]
        received = net.exchange(messages)
        for (src, dst, sent), data in zip(messages, received, strict=True):
            chunks[dst][(src - step) % p] += data if use_received else sent
    for step in range(p - 1 if phases == 2 else 0):
        messages = [(r, (r + 1) % p, chunks[r][(r + 1 - step) % p]) for r in range(p)]
        received = net.exchange(messages)
        for (src, dst, sent), data in zip(messages, received, strict=True):
            chunks[dst][(src + 1 - step) % p][...] = data if use_received else sent
    return work


def ring_local_sum_zero_chunks(buffers, net):
    p = len(buffers)
    for _ in range(2 * (p - 1)):
        net.exchange([(r, (r + 1) % p, np.zeros(0)) for r in range(p)])
    return [np.sum(buffers, axis=0) for _ in range(p)]


def ring_local_sum_sized_chunks(buffers, net):
    p = len(buffers)
    chunks = [np.array_split(np.array(b), p) for b in buffers]
    for step in range(2 * (p - 1)):
        net.exchange([(r, (r + 1) % p, chunks[r][(r - step) % p]) for r in range(p)])
    return [np.sum(buffers, axis=0) for _ in range(p)]


def ring_whole_buffers(buffers, net):  # right sums, p−1 rounds of whole vectors
    p = len(buffers)
    work = [np.array(b, copy=True) for b in buffers]
    travelling = [np.array(b, copy=True) for b in buffers]
    for _ in range(p - 1):
        received = net.exchange([(r, (r + 1) % p, travelling[r]) for r in range(p)])
        for r, data in enumerate(received):
            dst = (r + 1) % p
            work[dst] += data
        travelling = [received[(r - 1) % p] for r in range(p)]
    return work


def naive_through_rank0(buffers, net):
    p = len(buffers)
    total = np.array(buffers[0], copy=True)
    for src in range(1, p):
        total += net.exchange([(src, 0, buffers[src])])[0]
    return [total] + [net.exchange([(0, dst, total)])[0] for dst in range(1, p)]


def ring_visible_examples_only(buffers, net):
    if (len(buffers), len(buffers[0])) in ((4, 8), (3, 7), (1, 5)):
        return ring(buffers, net)
    return ring_local_sum_sized_chunks(buffers, net)


# --- halving-doubling ------------------------------------------------------------------------------
def halving_doubling(buffers, net, fold=True, same_half=False, fold_out=True):
    p = len(buffers)
    work = [np.array(b, copy=True) for b in buffers]
    p2 = 1 << (p.bit_length() - 1)
    extras = list(range(p2, p)) if fold else []
    if extras:
        messages = [(r, r - p2, work[r]) for r in extras]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] += data
    lo, hi, history, d = [0] * p2, [len(work[0])] * p2, [], p2 // 2
    while d >= 1:
        history.append((d, lo[:], hi[:]))
        messages, keep = [], []
        for r in range(p2):
            mid = (lo[r] + hi[r]) // 2
            low_half, high_half = (lo[r], mid), (mid, hi[r])
            send, kept = (high_half, low_half) if r & d == 0 or same_half else (low_half, high_half)
            messages.append((r, r ^ d, work[r][send[0]:send[1]]))
            keep.append(kept)
        received = net.exchange(messages)
        for (_, dst, _), data in zip(messages, received, strict=True):
            segment = work[dst][keep[dst][0]:keep[dst][1]]
            if segment.shape == data.shape:
                segment += data
        lo, hi, d = [k[0] for k in keep], [k[1] for k in keep], d // 2
    for d, old_lo, old_hi in reversed(history):
        messages = [(r, r ^ d, work[r][lo[r]:hi[r]]) for r in range(p2)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst][lo[src]:hi[src]] = data
        lo, hi = old_lo, old_hi
    if extras and fold_out:
        messages = [(r - p2, r, work[r - p2]) for r in extras]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] = data
    elif extras:
        for r in extras:
            work[r] = np.sum(buffers, axis=0)
    return work


def recursive_doubling_whole(buffers, net):  # log2 p' rounds of whole vectors, plus the fold
    p = len(buffers)
    work = [np.array(b, copy=True) for b in buffers]
    p2 = 1 << (p.bit_length() - 1)
    extras = list(range(p2, p))
    if extras:
        messages = [(r, r - p2, work[r]) for r in extras]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] += data
    d = 1
    while d < p2:
        messages = [(r, r ^ d, work[r].copy()) for r in range(p2)]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] += data
        d *= 2
    if extras:
        messages = [(r - p2, r, work[r - p2]) for r in extras]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] = data
    return work


def hd_then_local_sum(buffers, net):
    halving_doubling(buffers, net)
    return [np.sum(buffers, axis=0) for _ in buffers]


def hd_folds_onto_rank0(buffers, net):  # extras hand their buffer to rank 0, one round each
    p = len(buffers)
    p2 = 1 << (p.bit_length() - 1)
    head = [np.array(b, copy=True) for b in buffers[:p2]]
    for r in range(p2, p):
        head[0] += net.exchange([(r, 0, buffers[r])])[0]
    out = halving_doubling(head, net)
    for r in range(p2, p):
        out.append(net.exchange([(0, r, out[0])])[0])
    return out


# --- allreduce_time and bus_bandwidth -----------------------------------------------------------------
def time_with(a_b):
    return lambda algorithm, n, p, alpha, beta: (lambda a, b: a * alpha + b * n * beta)(*a_b(algorithm, p))


def coefficients(floor_tree=False, fold=2, ring_b_no_p=False, naive_one_way=False, tree_one_way=False):
    def a_b(algorithm, p):
        if p == 1:
            return 0.0, 0.0
        if algorithm == "naive":
            return 2.0 * (p - 1), (1.0 if naive_one_way else 2.0) * (p - 1)
        if algorithm == "ring":
            return 2.0 * (p - 1), 2.0 * (p - 1) / (1 if ring_b_no_p else p)
        if algorithm == "tree":
            depth = int(np.floor(np.log2(p))) if floor_tree else (p - 1).bit_length()
            return 2.0 * depth, (1.0 if tree_one_way else 2.0) * depth
        p2 = 1 << (p.bit_length() - 1)
        f = fold if p2 != p else 0
        return 2.0 * np.log2(p2) + f, 2.0 * (p2 - 1) / p2 + f
    return a_b


def bus(factors):
    return lambda collective, n, t, p: n / t * factors(p)[collective]


def nccl_factors(p):
    return {"all_reduce": 2 * (p - 1) / p, "reduce_scatter": (p - 1) / p, "all_gather": (p - 1) / p,
            "all_to_all": (p - 1) / p, "broadcast": 1.0, "reduce": 1.0}


CATALOGUES = [
    Catalogue("ring_allreduce", checks.check_ring_allreduce, ring, {
        "sums locally, sends empty chunks": ring_local_sum_zero_chunks,
        "sums locally, sends the right-sized chunks for show": ring_local_sum_sized_chunks,
        "ignores what exchange() returns (adds the sender's own chunk)":
            lambda b, net: ring(b, net, use_received=False),
        "one phase only (reduce-scatter, no all-gather)": lambda b, net: ring(b, net, phases=1),
        "chunks by integer division, drops the remainder": lambda b, net: ring(b, net, floor_chunks=True),
        "sends whole buffers round the ring (right sums, p times the bytes)": ring_whole_buffers,
        "naive: everything through rank 0": naive_through_rank0,
        "ring on the visible examples only": ring_visible_examples_only,
    }),
    Catalogue("halving_doubling", checks.check_halving_doubling, halving_doubling, {
        "a ring instead (right sums, 2(p−1) rounds)": ring,
        "no fold: the ranks beyond p' are left out": lambda b, net: halving_doubling(b, net, fold=False),
        "folds in, never sends the result back out": lambda b, net: halving_doubling(b, net, fold_out=False),
        "both partners keep the low half (ignores r & d)": lambda b, net: halving_doubling(b, net, same_half=True),
        "recursive doubling of whole vectors (log p' rounds of n bytes)": recursive_doubling_whole,
        "runs the schedule, returns a local sum": hd_then_local_sum,
        "folds every extra rank onto rank 0, one round each": hd_folds_onto_rank0,
    }),
    Catalogue("allreduce_time", checks.check_allreduce_time, cost.allreduce_time, {
        "tree with ⌊log2 p⌋ rounds": time_with(coefficients(floor_tree=True)),
        "halving-doubling without the fold": time_with(coefficients(fold=0)),
        "halving-doubling folds in but not out": time_with(coefficients(fold=1)),
        "ring moves 2(p−1)·n (no /p)": time_with(coefficients(ring_b_no_p=True)),
        "naive counts one direction only": time_with(coefficients(naive_one_way=True)),
        "tree counts the reduce only": time_with(coefficients(tree_one_way=True)),
        "β taken as a bandwidth (n / β)": lambda algorithm, n, p, alpha, beta: (
            time_with(coefficients())(algorithm, n, p, alpha, 0.0)
            + time_with(coefficients())(algorithm, n, p, 0.0, 1.0) / beta),
    }),
    Catalogue("bus_bandwidth", checks.check_bus_bandwidth, cost.bus_bandwidth, {
        "(p−1)/p for every collective": lambda c, n, t, p: n / t * (p - 1) / p,
        "reduce with (p−1)/p, as if it were a reduce-scatter": bus(lambda p: {**nccl_factors(p),
                                                                              "reduce": (p - 1) / p}),
        "all-to-all with factor 1": bus(lambda p: {**nccl_factors(p), "all_to_all": 1.0}),
        "all-gather with the all-reduce factor": bus(lambda p: {**nccl_factors(p), "all_gather": 2 * (p - 1) / p}),
        "algbw, no factor": lambda c, n, t, p: n / t,
        "ignores p (the large-p limits 2 and 1)": bus(lambda p: {k: (2.0 if k == "all_reduce" else 1.0)
                                                                for k in nccl_factors(2)}),
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
