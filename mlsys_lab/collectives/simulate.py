"""Collectives on simulated ranks, with exact message accounting.

Each rank is one NumPy array in a Python list. Ranks talk only through :class:`Network`, which
moves copies and counts bytes. A :meth:`Network.exchange` call is one synchronous *round* under the
α-β model's usual rule (Hockney 1994; Thakur, Rabenseifner & Gropp 2005): a rank sends at most one
message and receives at most one message per round (single-port, full-duplex). A round costs
α + β·(largest message in it), so the simulation's time is ``Σ_rounds α + β·max_bytes``, the very
sum :mod:`mlsys_lab.collectives.cost` writes in closed form.

Chunks are ``np.array_split`` pieces: any length works, chunk sizes differ by at most one element.
Buffers may be NumPy or CuPy arrays; messages stay in the module they came from. Lesson 08's
:mod:`mlsys_lab.parallelism.comm` runs these very functions on N-D tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.collectives.network import CollectiveResult, Network, array_module, check_buffers, make_result
from mlsys_lab.validation import check_array, check_bool, check_choice, check_finite, check_int, check_sequence


def _check_root(root: int, n_ranks: int) -> int:
    return check_int("root", root, low=0, high=n_ranks - 1)


# --- all-reduce -----------------------------------------------------------------------------------
def naive_allreduce(buffers: list[np.ndarray]) -> CollectiveResult:
    """Every rank sends to rank 0, which sums and sends the sum back: 2(p−1) rounds of n bytes.

    Rank 0 receives (p−1)·n and sends (p−1)·n bytes: the bottleneck the notes describe.
    """
    arrays = check_buffers(buffers)
    p, net = len(arrays), Network(len(arrays))
    total = arrays[0].copy()
    for src in range(1, p):
        total += net.exchange([(src, 0, arrays[src])])[0]
    outputs = [total]
    for dst in range(1, p):
        outputs.append(net.exchange([(0, dst, total)])[0])
    return make_result(outputs, net)


def _ring_reduce_scatter(views: list[list[np.ndarray]], net: Network, offset: int, snapshots=None, work=None):
    """p−1 rounds; at round s rank r sends chunk (r − s − offset) mod p to rank r+1, which adds it.

    Afterwards rank r holds the full sum of chunk (r + 1 − offset) mod p.
    """
    p = len(views)
    for step in range(p - 1):
        messages = [(r, (r + 1) % p, views[r][(r - step - offset) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            views[dst][(src - step - offset) % p] += data
        if snapshots is not None:
            snapshots.append(("reduce-scatter", step + 1, [w.copy() for w in work]))


def ring_allreduce(buffers: list[np.ndarray], record: bool = False) -> CollectiveResult:
    """Ring all-reduce (Patarasuk & Yuan 2009; Baidu 2017): reduce-scatter, then all-gather.

    Each buffer is cut into p chunks. Reduce-scatter: p−1 rounds, rank r sends chunk (r − s) to
    rank r+1, which adds it to its own copy (the notes' schedule). Rank r then owns the sum of
    chunk r+1. All-gather: p−1 more rounds passing finished chunks on. Every rank sends
    2(p−1)·⌈n/p⌉ elements at most: 2(p−1)/p·n up to chunk rounding. With ``record`` the result
    keeps a snapshot of every rank's buffer after each round (for the step-by-step widget).
    """
    check_bool("record", record)
    arrays = check_buffers(buffers)
    p, net = len(arrays), Network(len(arrays))
    work = [a.copy() for a in arrays]
    views = [array_module(w).array_split(w, p) for w in work]  # views into work: in-place adds update it
    snapshots = [("start", 0, [w.copy() for w in work])] if record else None
    _ring_reduce_scatter(views, net, offset=0, snapshots=snapshots, work=work)
    for step in range(p - 1):  # all-gather: rank r forwards the finished chunk (r + 1 − s)
        messages = [(r, (r + 1) % p, views[r][(r + 1 - step) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            views[dst][(src + 1 - step) % p][...] = data
        if record:
            snapshots.append(("all-gather", step + 1, [w.copy() for w in work]))
    return make_result(work, net, snapshots)


def _binomial_reduce(work: list[np.ndarray], net: Network, root: int) -> None:
    """Binomial tree: ⌈log2 p⌉ rounds; in round k, relative rank r ≡ 2^k (mod 2^(k+1)) sends to r − 2^k."""
    p = len(work)
    mask = 1
    while mask < p:
        messages = [
            ((rel + root) % p, (rel - mask + root) % p, work[(rel + root) % p])
            for rel in range(mask, p, 2 * mask)
        ]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            work[dst] += data
        mask *= 2


def _binomial_broadcast(work: list[np.ndarray], net: Network, root: int) -> None:
    """The reduce's rounds in reverse: relative rank r (a multiple of 2^(k+1)) sends to r + 2^k."""
    p = len(work)
    mask = 1
    while mask < p:
        mask *= 2
    while mask > 1:
        mask //= 2
        messages = [
            ((rel + root) % p, (rel + mask + root) % p, work[(rel + root) % p])
            for rel in range(0, p - mask, 2 * mask)
        ]
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            work[dst][...] = data


def tree_allreduce(buffers: list[np.ndarray]) -> CollectiveResult:
    """Binomial-tree reduce to rank 0, then binomial broadcast: 2⌈log2 p⌉ rounds of n bytes."""
    arrays = check_buffers(buffers)
    net = Network(len(arrays))
    work = [a.copy() for a in arrays]
    _binomial_reduce(work, net, root=0)
    _binomial_broadcast(work, net, root=0)
    return make_result(work, net)


def halving_doubling_allreduce(buffers: list[np.ndarray]) -> CollectiveResult:
    """Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling all-gather.

    For p = 2^k: 2·log2 p rounds and 2(p−1)/p·n bytes per rank (Thakur et al. 2005). Otherwise the
    p − 2^k extra ranks first hand their buffer to a partner and get the result back at the end:
    two more rounds of n bytes.
    """
    arrays = check_buffers(buffers)
    p, net = len(arrays), Network(len(arrays))
    work = [a.copy() for a in arrays]
    p2 = 1 << (p.bit_length() - 1)  # largest power of two <= p
    extras = [(r, r - p2) for r in range(p2, p)]
    for (_, partner), data in zip(
        extras, net.exchange([(src, dst, work[src]) for src, dst in extras]), strict=False
    ):
        work[partner] += data
    lo, hi = [0] * p2, [len(work[0])] * p2  # the segment [lo, hi) each rank is responsible for
    history = []
    distance = p2 // 2
    while distance >= 1:  # recursive halving: keep one half, send the other to the partner
        history.append((distance, lo.copy(), hi.copy()))
        messages, keep = [], []
        for r in range(p2):
            mid = (lo[r] + hi[r]) // 2
            send, kept = ((mid, hi[r]), (lo[r], mid)) if r & distance == 0 else ((lo[r], mid), (mid, hi[r]))
            messages.append((r, r ^ distance, work[r][send[0] : send[1]]))
            keep.append(kept)
        for (_, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            work[dst][keep[dst][0] : keep[dst][1]] += data
        lo, hi = [k[0] for k in keep], [k[1] for k in keep]
        distance //= 2
    for distance, old_lo, old_hi in reversed(history):  # recursive doubling: swap finished segments
        messages = [(r, r ^ distance, work[r][lo[r] : hi[r]]) for r in range(p2)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            work[dst][lo[src] : hi[src]] = data
        lo, hi = old_lo, old_hi
    back = [(partner, extra, work[partner]) for extra, partner in extras]
    for (_, extra, _), data in zip(back, net.exchange(back), strict=False):
        work[extra] = data
    return make_result(work, net)


ALLREDUCE_ALGORITHMS = {
    "naive": naive_allreduce,
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "halving_doubling": halving_doubling_allreduce,
}


# --- the other collectives ------------------------------------------------------------------------
def reduce_scatter(buffers: list[np.ndarray]) -> CollectiveResult:
    """Ring reduce-scatter: rank r ends with chunk r of the sum (``np.array_split(sum, p)[r]``)."""
    arrays = check_buffers(buffers)
    p, net = len(arrays), Network(len(arrays))
    work = [a.copy() for a in arrays]
    views = [array_module(w).array_split(w, p) for w in work]
    _ring_reduce_scatter(views, net, offset=1)
    return make_result([views[r][r].copy() for r in range(p)], net)


def all_gather(buffers: list[np.ndarray]) -> CollectiveResult:
    """Ring all-gather: every rank ends with the concatenation of all ranks' buffers (any lengths)."""
    arrays = check_buffers(buffers, same_length=False)
    p, net = len(arrays), Network(len(arrays))
    blocks = [[None] * p for _ in range(p)]
    for r in range(p):
        blocks[r][r] = arrays[r].copy()
    for step in range(p - 1):
        messages = [(r, (r + 1) % p, blocks[r][(r - step) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            blocks[dst][(src - step) % p] = data
    return make_result([array_module(*b).concatenate(b) for b in blocks], net)


def broadcast(buffers: list[np.ndarray], root: int = 0) -> CollectiveResult:
    """Binomial-tree broadcast of ``buffers[root]``: ⌈log2 p⌉ rounds of n bytes."""
    arrays = check_buffers(buffers)
    root = _check_root(root, len(arrays))
    net = Network(len(arrays))
    work = [a.copy() for a in arrays]
    _binomial_broadcast(work, net, root)
    return make_result(work, net)


def reduce(buffers: list[np.ndarray], root: int = 0) -> CollectiveResult:
    """Binomial-tree reduce: ``outputs[root]`` is the sum, the other outputs are None."""
    arrays = check_buffers(buffers)
    root = _check_root(root, len(arrays))
    net = Network(len(arrays))
    work = [a.copy() for a in arrays]
    _binomial_reduce(work, net, root)
    return make_result([work[r] if r == root else None for r in range(len(work))], net)


def all_to_all(buffers: list[np.ndarray]) -> CollectiveResult:
    """Pairwise all-to-all: block j of rank i (``np.array_split(buffers[i], p)[j]``) goes to rank j.

    p−1 rounds; in round k rank r sends to r+k and receives from r−k. Output j concatenates the
    blocks addressed to j in rank order.
    """
    arrays = check_buffers(buffers, same_length=False)
    result = all_to_all_pieces([array_module(a).array_split(a, len(arrays)) for a in arrays])
    result.outputs = [array_module(*inbox).concatenate(inbox) for inbox in result.outputs]
    return result


def all_to_all_pieces(send: list[list]) -> CollectiveResult:
    """Pairwise all-to-all of addressed pieces: ``send[i][j]`` (any shape and size) goes from rank i to rank j.

    The same p−1 rounds as :func:`all_to_all`. ``outputs[j]`` is the list ``[send[0][j], …, send[p−1][j]]``
    as rank j received it (MoE dispatch: each rank sends each expert's rank a different number of tokens).
    """
    for row in check_sequence("send", send, min_size=1):
        check_sequence("send", row)
    p = len(send)
    if p < 1 or any(len(row) != p for row in send):
        raise ValueError(f"send must be a p x p nested list of arrays; got {p} rows of lengths "
                         f"{[len(row) for row in send]}")
    net = Network(p)
    inbox = [[None] * p for _ in range(p)]
    for r in range(p):
        inbox[r][r] = array_module(send[r][r]).asarray(send[r][r]).copy()
    for shift in range(1, p):
        messages = [(r, (r + shift) % p, send[r][(r + shift) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=False):
            inbox[dst][src] = data
    return make_result(inbox, net)


def ring_contributions(n_ranks: int) -> list[tuple[str, int, np.ndarray]]:
    """Round by round, who has summed what: (phase, round, counts), counts[r, c] = inputs in rank r's chunk c.

    Runs :func:`ring_allreduce` on one-hot bit masks (rank r contributes 2^r to every chunk, one
    element per chunk) and counts the set bits. Round 0 is the start; 2(p−1) rounds follow.
    """
    p = check_int("n_ranks", n_ranks, low=1, high=62)
    result = ring_allreduce([np.full(p, 1 << r, dtype=np.int64) for r in range(p)], record=True)
    bits = 1 << np.arange(p, dtype=np.int64)
    return [
        (phase, step, ((np.array(values)[:, :, None] & bits) != 0).sum(axis=2))
        for phase, step, values in result.snapshots
    ]


@dataclass(frozen=True)
class RingState:
    """The ring all-reduce after ``step`` rounds: ``contributions[r, c]`` = inputs summed in rank r's chunk c."""

    n_ranks: int
    step: int
    phase: str  # "start", "reduce-scatter" or "all-gather"
    contributions: np.ndarray  # (p, p) ints in 1..p
    bytes_sent_per_rank: float  # so far, for a vector of ``vector_bytes``: one chunk n/p per round

    def __post_init__(self) -> None:
        p = check_int("n_ranks", self.n_ranks, low=2, high=62)  # as ring_state
        check_int("step", self.step, low=0, high=2 * (p - 1))
        check_choice("phase", self.phase, ("start", "reduce-scatter", "all-gather"))
        counts = check_array("contributions", self.contributions, ndim=2, kinds="iu")
        if counts.shape != (p, p):
            raise ValueError(f"contributions must be (n_ranks, n_ranks) = ({p}, {p}); got {counts.shape}")
        if (counts < 1).any() or (counts > p).any():
            raise ValueError(f"contributions must count 1..n_ranks={p} inputs per chunk")
        check_finite("bytes_sent_per_rank", self.bytes_sent_per_rank, low=0.0)


def ring_state(n_ranks: int, step: int, vector_bytes: float = 2**20) -> RingState:
    """The ring on p ranks after ``step`` of its 2(p−1) rounds (:func:`ring_contributions`).

    Each round every rank sends one chunk, n/p bytes of an n-byte vector: step·n/p so far.
    """
    p = check_int("n_ranks", n_ranks, low=2, high=62)
    step = check_int("step", step, low=0, high=2 * (p - 1))
    check_finite("vector_bytes", vector_bytes, low=0.0)
    phase, _, counts = ring_contributions(p)[step]
    return RingState(p, step, phase, counts, step * vector_bytes / p)
