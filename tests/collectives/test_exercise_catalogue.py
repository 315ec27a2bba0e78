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



# --- two-level (hierarchical) all-reduce ---------------------------------------------------------------
def ring_phase(net, chunks, right, position, k, offset, add, use_received=True, ranks=None):
    """k−1 rounds: rank r sends chunk (position[r] + offset − s) mod k to right[r], which adds or copies it."""
    ranks = range(len(chunks)) if ranks is None else ranks
    for s in range(k - 1):
        messages = [(r, right[r], chunks[r][(position[r] + offset - s) % k]) for r in ranks]
        for (src, dst, sent), data in zip(messages, net.exchange(messages), strict=True):
            target = chunks[dst][(position[src] + offset - s) % k]
            value = data if use_received else sent
            if add:
                target += value
            else:
                target[...] = value


def split(array, k, floor_chunks=False):
    if not floor_chunks:
        return np.array_split(array, k)
    size = len(array) // k
    return [array[i * size:(i + 1) * size] for i in range(k)]


def hierarchical(buffers, net, g, strided=False, floor_chunks=False, use_received=True, across=True,
                 gather=True):
    p = len(buffers)
    n_nodes = p // g
    if strided:  # node = r mod N: the ranks of a "node" sit on different machines
        node, local = [r % n_nodes for r in range(p)], [r // n_nodes for r in range(p)]
        rank_of = lambda nd, lc: lc * n_nodes + nd  # noqa: E731
    else:
        node, local = [r // g for r in range(p)], [r % g for r in range(p)]
        rank_of = lambda nd, lc: nd * g + lc  # noqa: E731
    in_node = [rank_of(node[r], (local[r] + 1) % g) for r in range(p)]
    next_node = [rank_of((node[r] + 1) % n_nodes, local[r]) for r in range(p)]
    work = [np.array(b, copy=True) for b in buffers]
    shards = [split(w, g, floor_chunks) for w in work]
    ring_phase(net, shards, in_node, local, g, 0, True, use_received)
    pieces = [split(shards[r][(local[r] + 1) % g], n_nodes, floor_chunks) for r in range(p)]
    if across:
        ring_phase(net, pieces, next_node, node, n_nodes, 0, True, use_received)
        ring_phase(net, pieces, next_node, node, n_nodes, 1, False, use_received)
    if gather:
        ring_phase(net, shards, in_node, local, g, 1, False, use_received)
    return work


def ring_within(net, buffers, groups):
    """A ring all-reduce of whole buffers inside each group of ranks, all groups in the same rounds."""
    p = len(buffers)
    k = len(groups[0])
    right, position = [0] * p, [0] * p
    for group in groups:
        for i, r in enumerate(group):
            right[r], position[r] = group[(i + 1) % k], i
    work = [np.array(b, copy=True) for b in buffers]
    chunks = [np.array_split(w, k) for w in work]
    ring_phase(net, chunks, right, position, k, 0, True)
    ring_phase(net, chunks, right, position, k, 1, False)
    return work


def hierarchical_whole_buffers(buffers, net, g):  # all-reduce in the node, then whole buffers across
    p = len(buffers)
    n_nodes = p // g
    work = ring_within(net, buffers, [list(range(nd * g, nd * g + g)) for nd in range(n_nodes)])
    return ring_within(net, work, [list(range(lc, p, g)) for lc in range(g)])


def hierarchical_one_nic(buffers, net, g):  # all-reduce in the node; only GPU 0 of each node crosses
    p = len(buffers)
    n_nodes = p // g
    work = ring_within(net, buffers, [list(range(nd * g, nd * g + g)) for nd in range(n_nodes)])
    leaders = [nd * g for nd in range(n_nodes)]
    chunks, right, position = [None] * p, [0] * p, [0] * p
    for i, r in enumerate(leaders):
        chunks[r], right[r], position[r] = np.array_split(work[r], n_nodes), leaders[(i + 1) % n_nodes], i
    ring_phase(net, chunks, right, position, n_nodes, 0, True, ranks=leaders)
    ring_phase(net, chunks, right, position, n_nodes, 1, False, ranks=leaders)
    for s in range(1, g):  # pass the result down each node, one GPU per round
        messages = [(nd * g + s - 1, nd * g + s, work[nd * g + s - 1]) for nd in range(n_nodes)]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            work[dst] = data
    return work


def hierarchical_local_sum(buffers, net, g):
    hierarchical(buffers, net, g)
    return [np.sum(buffers, axis=0) for _ in buffers]


def hierarchical_visible_only(buffers, net, g):
    if (len(buffers), g, len(buffers[0])) == (8, 4, 16):
        return hierarchical(buffers, net, g)
    return hierarchical_local_sum(buffers, net, g)



# --- two-level (hierarchical) all-to-all -------------------------------------------------------------------
def hierarchical_a2a(buffers, net, g, strided=False, whole_staging=False, transposed=False, across=True,
                     use_received=True):
    p = len(buffers)
    n_nodes, m = p // g, buffers[0].shape[1]
    if strided:  # node = r mod N
        node, local = [r % n_nodes for r in range(p)], [r // n_nodes for r in range(p)]
        rank_of = lambda a, lc: lc * n_nodes + a  # noqa: E731
    else:
        node, local = [r // g for r in range(p)], [r % g for r in range(p)]
        rank_of = lambda a, lc: a * g + lc  # noqa: E731
    # staging[r][b, l'] = the row that GPU l' of r's node sends to GPU local[r] of node b
    staging = [np.zeros((n_nodes, g, m), dtype=buffers[0].dtype) for _ in range(p)]
    for r in range(p):
        staging[r][:, local[r]] = buffers[r][[rank_of(b, local[r]) for b in range(n_nodes)]]
    for s in range(1, g):  # 1. inside the node: to local index l + s, the rows bound for that index on every node
        messages = []
        for r in range(p):
            target = (local[r] + s) % g
            messages.append((r, rank_of(node[r], target), buffers[r][[rank_of(b, target) for b in range(n_nodes)]]))
        for (src, dst, sent), data in zip(messages, net.exchange(messages), strict=True):
            staging[dst][:, local[src]] = data if use_received else sent
    out = [np.zeros((p, m), dtype=buffers[0].dtype) for _ in range(p)]

    def place(dst, src_node, bundle):
        for lc in range(g):
            row = lc * n_nodes + src_node if transposed else rank_of(src_node, lc)
            out[dst][row] = bundle[lc]

    for r in range(p):
        place(r, node[r], staging[r][node[r]])
    for s in range(1, n_nodes if across else 1):  # 2. across: one bundle of g rows per remote node
        messages = []
        for r in range(p):
            b = (node[r] + s) % n_nodes
            messages.append((r, rank_of(b, local[r]), staging[r] if whole_staging else staging[r][b]))
        for (src, dst, sent), data in zip(messages, net.exchange(messages), strict=True):
            data = data if use_received else sent
            place(dst, node[src], data[node[dst]] if whole_staging else data)
    return out


def flat_a2a(buffers, net, g):  # pairwise exchange over all p GPUs: p − 1 rounds
    p = len(buffers)
    out = [np.zeros_like(b) for b in buffers]
    for r in range(p):
        out[r][r] = buffers[r][r]
    for s in range(1, p):
        messages = [(r, (r + s) % p, buffers[r][(r + s) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            out[dst][src] = data
    return out


def a2a_local_transpose(buffers, net, g):
    hierarchical_a2a(buffers, net, g)
    return [np.stack([b[j] for b in buffers]) for j in range(len(buffers))]


def a2a_visible_only(buffers, net, g):
    if (len(buffers), g, buffers[0].shape[1]) == (4, 2, 1):
        return hierarchical_a2a(buffers, net, g)
    return a2a_local_transpose(buffers, net, g)


# --- allreduce_time ------------------------------------------------------------------------------------
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
    Catalogue("hierarchical_allreduce", checks.check_hierarchical_allreduce, hierarchical, {
        "a flat ring over all N·g GPUs (right sums, 2(Ng−1) rounds)": lambda b, net, g: ring(b, net),
        "skips the reduce-scatter: whole buffers cross the nodes": hierarchical_whole_buffers,
        "ignores the node layout (node = r mod N)": lambda b, net, g: hierarchical(b, net, g, strided=True),
        "only GPU 0 of each node crosses nodes (one NIC)": hierarchical_one_nic,
        "never crosses the nodes (each node's sum only)": lambda b, net, g: hierarchical(b, net, g, across=False),
        "no final all-gather inside the node": lambda b, net, g: hierarchical(b, net, g, gather=False),
        "chunks by integer division, drops the remainder":
            lambda b, net, g: hierarchical(b, net, g, floor_chunks=True),
        "ignores what exchange() returns (adds the sender's own chunk)":
            lambda b, net, g: hierarchical(b, net, g, use_received=False),
        "runs the schedule, returns a local sum": hierarchical_local_sum,
        "two-level on the visible example only": hierarchical_visible_only,
    }),
    Catalogue("hierarchical_alltoall", checks.check_hierarchical_alltoall, hierarchical_a2a, {
        "flat pairwise exchange over all p GPUs (right rows, p − 1 rounds)": flat_a2a,
        "ignores the node layout (node = r mod N)": lambda b, net, g: hierarchical_a2a(b, net, g, strided=True),
        "sends every node's bundle to every node": lambda b, net, g: hierarchical_a2a(b, net, g, whole_staging=True),
        "places a bundle's rows as l·N + a (transposed)":
            lambda b, net, g: hierarchical_a2a(b, net, g, transposed=True),
        "never crosses the nodes": lambda b, net, g: hierarchical_a2a(b, net, g, across=False),
        "ignores what exchange() returns (copies the sender's rows)":
            lambda b, net, g: hierarchical_a2a(b, net, g, use_received=False),
        "runs the schedule, returns a local transpose": a2a_local_transpose,
        "two-level on the visible example only": a2a_visible_only,
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
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
