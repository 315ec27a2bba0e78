"""Checks for the exercises of 07_collectives.

The simulated-network exercises (ring, halving-doubling and two-level all-reduce) run the learner's function twice per
case on a :class:`Network` that stays on the checking side: once as it is, where the results must be the sums
and the traffic must be the algorithm's (bytes per rank, rounds, who talks to whom), and once on a network
that adds :data:`MARK` to every value it delivers. Every value of a rank's result must reach it through
``exchange`` (its own chunk plus a received partial sum, or a received finished chunk), so on the marked
network every value of every result carries at least one mark: a result computed from the other ranks'
buffers directly, or from what a rank *sent* rather than what it received, comes out unmarked. The two-level
exercise runs on a :class:`TwoLevelNetwork`, which books each rank's bytes to NVLink or to the NICs.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from mlsys_lab.collectives import cost
from mlsys_lab.collectives.network import Network, TwoLevelNetwork
from mlsys_lab.exercises import Case, check, is_number, rng

MARK = 1000.0  # added to every value in transit on the marked network (the inputs are of order 1)


class _MarkingNetwork(Network):
    """A :class:`Network` that records who talked to whom each round and can add ``mark`` to what it delivers."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"exchange", "n_ranks", "steps"})

    def __init__(self, n_ranks: int, mark: float = 0.0) -> None:
        super().__init__(n_ranks)
        self.mark, self.pairs = mark, []

    def exchange(self, messages):
        received = super().exchange(messages)
        if received:
            self.pairs.append(sorted((int(src), int(dst)) for src, dst, _ in messages))
        return [r + self.mark for r in received] if self.mark else received



class _MarkingTwoLevelNetwork(TwoLevelNetwork):
    """A :class:`TwoLevelNetwork` that can add ``mark`` to what it delivers (see :class:`_MarkingNetwork`)."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({
        "exchange", "n_ranks", "steps", "n_nodes", "gpus_per_node", "node_of",
    })

    def __init__(self, n_nodes: int, gpus_per_node: int, mark: float = 0.0) -> None:
        super().__init__(n_nodes, gpus_per_node)
        self.mark = mark

    def exchange(self, messages):
        received = super().exchange(messages)
        return [r + self.mark for r in received] if self.mark else received

def _results_problem(got, total: np.ndarray, p: int) -> str | None:
    """None if ``got`` is p arrays each equal to ``total``; otherwise what is wrong."""
    if not isinstance(got, (list, tuple)) or len(got) != p:
        return f"expected a list of {p} arrays (one per rank); got {type(got).__name__} of length " \
               f"{len(got) if hasattr(got, '__len__') else '?'}"
    tol = 1e-5 if total.dtype == np.float32 else 1e-9  # float32 sums differ by summation order
    for rank, out in enumerate(got):
        try:
            arr = np.asarray(out, dtype=float)
        except (TypeError, ValueError):
            return f"rank {rank}'s result is not an array of numbers: {type(out).__name__}"
        if arr.shape != total.shape:
            return f"rank {rank}'s result has shape {arr.shape}; expected {total.shape}"
        if not np.allclose(arr, total, rtol=tol, atol=tol):
            j = int(np.argmax(~np.isclose(arr, total, rtol=tol, atol=tol)))
            return f"rank {rank}'s result at index {j} is {arr[j]:.6g}; the sum is {total[j]:.6g}"
    return None


def _run_allreduce(fn: Callable, buffers: list[np.ndarray], traffic: Callable[[_MarkingNetwork], str | None],
                   make_net: Callable[[float], Network] | None = None, extra: tuple = ()) -> str:
    """'ok', or what is wrong: the sums, the traffic, then where each result's values came from.

    ``make_net(mark)`` builds the network (default: a :class:`_MarkingNetwork` of len(buffers) ranks); ``extra``
    are further arguments of ``fn`` after ``(buffers, net)``.
    """
    p, n = len(buffers), len(buffers[0])
    make_net = make_net or (lambda mark: _MarkingNetwork(p, mark))
    total = np.sum(buffers, axis=0) if n else np.zeros(0)
    net = make_net(0.0)
    problem = _results_problem(fn([b.copy() for b in buffers], net, *extra), total, p) or traffic(net)
    if problem or p == 1 or n == 0:
        return problem or "ok"
    got = fn([b.copy() for b in buffers], make_net(MARK), *extra)
    for rank, out in enumerate(got):
        unmarked = np.flatnonzero(np.asarray(out, dtype=float) - total < MARK / 2)
        if unmarked.size:
            return (f"rank {rank}'s value at index {int(unmarked[0])} did not come through exchange(): the check "
                    f"re-ran with +{MARK:g} added to every value in transit and that value came out unmarked "
                    "(a rank may use only its own buffer and what exchange() returned to it)")
    return "ok"


def _allreduce_cases(label: str, fn: Callable, buffers: list[np.ndarray], traffic: Callable) -> Case:
    return Case(label, (fn, buffers, traffic), expected="ok", check_result=lambda got: None if got == "ok" else got)


def _verdict_only(got, expected) -> bool:  # the verdict is in check_result: a message names what is wrong
    return True


# --- exercise 1: the ring ---------------------------------------------------------------------------
def _ring_traffic(p: int, n: int, itemsize: int) -> Callable[[_MarkingNetwork], str | None]:
    """Every rank sent what a ring sends (up to chunk rounding) in at most 2(p−1) rounds."""

    def verdict(net: _MarkingNetwork) -> str | None:
        low, high = 2 * (p - 1) * (n // p) * itemsize, 2 * (p - 1) * -(-n // p) * itemsize
        for rank, sent in enumerate(net.bytes_sent):
            if not low <= sent <= high:
                uneven = f" (between {low} and {high} with uneven chunks)" if low != high else ""
                return (f"rank {rank} sent {int(sent)} bytes; a ring sends 2(p−1)/p·n·itemsize = "
                        f"{2 * (p - 1) * n * itemsize / p:.0f}{uneven}")
        if net.steps > 2 * (p - 1):
            return f"took {net.steps} rounds; the ring needs 2(p−1) = {2 * (p - 1)}"
        return None

    return verdict


def _ring_case(fn: Callable, label: str, buffers: list[np.ndarray]) -> Case:
    p, n = len(buffers), len(buffers[0])
    return _allreduce_cases(label, fn, buffers, _ring_traffic(p, n, buffers[0].itemsize))


def check_ring_allreduce(fn: Callable) -> None:
    """``fn(buffers, net)`` -> one array per rank, each the sum; all traffic goes through ``net.exchange``."""
    g = rng()
    cases = [
        _ring_case(fn, "p=4, n=8", [np.arange(8.0) + 10 * r for r in range(4)]),
        _ring_case(fn, "p=3, n=7", [np.arange(7.0) * (r + 1) for r in range(3)]),
        _ring_case(fn, "p=1, n=5", [np.arange(5.0)]),
        _ring_case(fn, "p=2, n=1", [g.standard_normal(1) for _ in range(2)]),
        _ring_case(fn, "p=5, n=3 (n < p: empty chunks)", [g.standard_normal(3) for _ in range(5)]),
        _ring_case(fn, "p=6, n=0", [np.zeros(0) for _ in range(6)]),
        _ring_case(fn, "p=7, n=23, float32", [g.standard_normal(23).astype(np.float32) for _ in range(7)]),
    ]
    for _ in range(7):
        p, n = int(g.integers(2, 13)), int(g.integers(0, 301))
        cases.append(_ring_case(fn, f"p={p}, n={n}", [g.standard_normal(n) for _ in range(p)]))
    check("ring_allreduce", _run_allreduce, cases, compare=_verdict_only, learner=fn)


# --- exercise 2: recursive halving-doubling with the non-power-of-two fold ---------------------------
def _halving_doubling_traffic(p: int, n: int, itemsize: int) -> Callable[[_MarkingNetwork], str | None]:
    """Rabenseifner's schedule: fold, log2 p' halving rounds, log2 p' doubling rounds, unfold; its bytes."""
    p2 = 1 << (p.bit_length() - 1)
    k, extra = p2.bit_length() - 1, p - p2
    rounds = 2 * k + (2 if extra else 0)

    def verdict(net: _MarkingNetwork) -> str | None:
        if net.steps != rounds:
            fold = f" + 2 (fold in, fold out: p = {p} is not a power of two)" if extra else ""
            return f"took {net.steps} rounds; halving-doubling takes 2·log2 p' = {2 * k}{fold} with p' = {p2}"
        core = net.pairs[1:-1] if extra else net.pairs
        if extra:
            fold_in = sorted((r, r - p2) for r in range(p2, p))
            if net.pairs[0] != fold_in or net.pairs[-1] != sorted((d, s) for s, d in fold_in):
                return (f"the first round must fold ranks {p2}..{p - 1} into ranks 0..{extra - 1} "
                        f"(rank r sends to r − {p2}) and the last must send the results back; got "
                        f"{net.pairs[0]} and {net.pairs[-1]}")
        distances = []
        for index, pairs in enumerate(core):
            d = pairs[0][1] ^ pairs[0][0]
            if pairs != sorted((r, r ^ d) for r in range(p2)) or d & (d - 1):
                return (f"round {index + (2 if extra else 1)}: every rank r < {p2} must exchange with r XOR d "
                        f"for one power of two d; got {pairs}")
            distances.append(d)
        want = sorted(1 << i for i in range(k))
        if sorted(distances[:k]) != want or sorted(distances[k:]) != want:
            return f"partner distances per round {distances}: each phase must use every distance in {want} once"
        slack = 2 * k  # halves of odd lengths: one element either way per round
        for rank, sent in enumerate(net.bytes_sent):
            if rank < p2:
                due = 2 * (p2 - 1) / p2 * n + (n if rank < extra else 0)
            else:
                due = n
            if abs(sent / itemsize - due) > slack + 1e-9:
                return (f"rank {rank} sent {int(sent)} bytes; halving-doubling sends about {due * itemsize:.0f} "
                        "(2(p'−1)/p'·n per rank, plus n for the fold)")
        return None

    return verdict


def _hd_case(fn: Callable, label: str, buffers: list[np.ndarray]) -> Case:
    p, n = len(buffers), len(buffers[0])
    return _allreduce_cases(label, fn, buffers, _halving_doubling_traffic(p, n, buffers[0].itemsize))


def check_halving_doubling(fn: Callable) -> None:
    """``fn(buffers, net)`` -> one array per rank, each the sum, by recursive halving then doubling."""
    g = rng()
    cases = [
        _hd_case(fn, "p=4, n=8", [np.arange(8.0) + 10 * r for r in range(4)]),
        _hd_case(fn, "p=6, n=12 (fold 2 ranks)", [np.arange(12.0) * (r + 1) for r in range(6)]),
        _hd_case(fn, "p=1, n=5", [np.arange(5.0)]),
        _hd_case(fn, "p=2, n=3", [g.standard_normal(3) for _ in range(2)]),
        _hd_case(fn, "p=3, n=5 (fold 1 rank)", [g.standard_normal(5) for _ in range(3)]),
        _hd_case(fn, "p=8, n=13 (odd halves)", [g.standard_normal(13) for _ in range(8)]),
        _hd_case(fn, "p=7, n=2 (n < p')", [g.standard_normal(2) for _ in range(7)]),
        _hd_case(fn, "p=5, n=0", [np.zeros(0) for _ in range(5)]),
        _hd_case(fn, "p=12, n=40, float32", [g.standard_normal(40).astype(np.float32) for _ in range(12)]),
    ]
    for _ in range(6):
        p, n = int(g.integers(2, 17)), int(g.integers(0, 257))
        cases.append(_hd_case(fn, f"p={p}, n={n}", [g.standard_normal(n) for _ in range(p)]))
    check("halving_doubling", _run_allreduce, cases, compare=_verdict_only, learner=fn)



# --- exercise 3: the two-level (hierarchical) all-reduce --------------------------------------------------
def _hierarchical_traffic(n_nodes: int, g: int, n: int, itemsize: int) -> Callable[[TwoLevelNetwork], str | None]:
    """Each rank sent a ring's 2(g−1)/g·n inside its node and 2(N−1)/N·(n/g) across nodes, up to chunk rounding,
    in at most 2(g−1) + 2(N−1) rounds: the two terms of :func:`cost.hierarchical_allreduce_time`."""
    rounds = 2 * (g - 1) + 2 * (n_nodes - 1)
    shard_low, shard_high = n // g, -(-n // g)  # np.array_split's chunk sizes
    budgets = (  # (link, low, high, due, formula) in bytes
        ("over NVLink (inside its node)", 2 * (g - 1) * shard_low * itemsize, 2 * (g - 1) * shard_high * itemsize,
         2 * (g - 1) * n / g * itemsize, "2(g−1)/g·n·itemsize"),
        ("across nodes (NIC)", 2 * (n_nodes - 1) * (shard_low // n_nodes) * itemsize,
         2 * (n_nodes - 1) * -(-shard_high // n_nodes) * itemsize,
         2 * (n_nodes - 1) * n / (g * n_nodes) * itemsize, "2(N−1)/N·(n/g)·itemsize"),
    )

    def verdict(net: TwoLevelNetwork) -> str | None:
        for (link, low, high, due, formula), sent in zip(budgets, (net.bytes_sent_intra, net.bytes_sent_inter),
                                                         strict=True):
            for rank, value in enumerate(sent):
                if not low <= value <= high:
                    uneven = f" (between {low} and {high} with uneven chunks)" if low != high else ""
                    return (f"rank {rank} (node {rank // g}, GPU {rank % g}) sent {int(value)} bytes {link}; a "
                            f"two-level all-reduce sends {formula} = {due:.0f}{uneven}")
        if net.steps > rounds:
            return f"took {net.steps} rounds; the two-level all-reduce needs 2(g−1) + 2(N−1) = {rounds}"
        return None

    return verdict


def _hierarchical_case(fn: Callable, n_nodes: int, g: int, buffers: list[np.ndarray], note: str = "") -> Case:
    n = len(buffers[0])
    label = f"{n_nodes} nodes x {g} GPUs, n={n}" + (f", {note}" if note else "")
    traffic = _hierarchical_traffic(n_nodes, g, n, buffers[0].itemsize)
    return Case(label, (fn, buffers, traffic, lambda mark: _MarkingTwoLevelNetwork(n_nodes, g, mark), (g,)),
                expected="ok", check_result=lambda got: None if got == "ok" else got)


def check_hierarchical_allreduce(fn: Callable) -> None:
    """``fn(buffers, net, gpus_per_node)`` -> one array per rank, each the sum: reduce-scatter inside each node,
    ring all-reduce of the shards across nodes, all-gather inside the node; traffic booked per link class."""
    gen = rng()

    def normal(p: int, n: int, dtype=np.float64) -> list[np.ndarray]:
        return [gen.standard_normal(n).astype(dtype) for _ in range(p)]

    cases = [
        _hierarchical_case(fn, 2, 4, [np.arange(16.0) * (r + 1) for r in range(8)]),
        _hierarchical_case(fn, 3, 2, [np.arange(13.0) + 10 * r for r in range(6)], "uneven shards"),
        _hierarchical_case(fn, 1, 4, normal(4, 10), "one node: NVLink only"),
        _hierarchical_case(fn, 4, 1, normal(4, 9), "one GPU per node: NICs only"),
        _hierarchical_case(fn, 1, 1, normal(1, 5)),
        _hierarchical_case(fn, 2, 3, normal(6, 4), "n < N·g: empty chunks"),
        _hierarchical_case(fn, 3, 4, [np.zeros(0) for _ in range(12)]),
        _hierarchical_case(fn, 2, 8, normal(16, 257, np.float32), "float32"),
        _hierarchical_case(fn, 4, 2, normal(8, 64), "n = 8·N·g"),
    ]
    for _ in range(6):
        n_nodes, gpus = int(gen.integers(2, 6)), int(gen.integers(2, 9))
        cases.append(_hierarchical_case(fn, n_nodes, gpus, normal(n_nodes * gpus, int(gen.integers(0, 401)))))
    check("hierarchical_allreduce", _run_allreduce, cases, compare=_verdict_only, learner=fn)


# --- exercise 4: the two-level (hierarchical) all-to-all ------------------------------------------------
def _alltoall_problem(got, expected: list[np.ndarray], marked: bool) -> str | None:
    """None if rank j's result is every rank's row j (row i from rank i), carrying a mark off the diagonal."""
    p = len(expected)
    if not isinstance(got, (list, tuple)) or len(got) != p:
        return f"expected a list of {p} arrays (one per rank); got {type(got).__name__} of length " \
               f"{len(got) if hasattr(got, '__len__') else '?'}"
    for rank, (out, want) in enumerate(zip(got, expected, strict=True)):
        try:
            arr = np.asarray(out, dtype=float)
        except (TypeError, ValueError):
            return f"rank {rank}'s result is not an array of numbers: {type(out).__name__}"
        if arr.shape != want.shape:
            return f"rank {rank}'s result has shape {arr.shape}; expected {want.shape} (row i from rank i)"
        if marked:
            off = np.flatnonzero(np.any(arr - want < MARK / 2, axis=1))
            off = off[off != rank]
            if off.size:
                return (f"rank {rank}'s row {int(off[0])} (from rank {int(off[0])}) did not come through exchange(): "
                        f"the check re-ran with +{MARK:g} added to every value in transit and it came out unmarked")
        elif not np.allclose(arr, want, rtol=0, atol=1e-6):
            row = int(np.argmax(np.any(~np.isclose(arr, want, rtol=0, atol=1e-6), axis=1)))
            return (f"rank {rank}'s row {row} is {np.array2string(arr[row], precision=4, threshold=6)}; it should "
                    f"be rank {row}'s row {rank}, {np.array2string(want[row], precision=4, threshold=6)}")
    return None


def _run_alltoall(fn: Callable, buffers: list[np.ndarray], n_nodes: int, g: int) -> str:
    """'ok', or what is wrong: the rows, the traffic per link class and rounds, then the marks."""
    p, m = len(buffers), buffers[0].shape[1]
    expected = [np.stack([buffers[i][j] for i in range(p)]) for j in range(p)]
    net = _MarkingTwoLevelNetwork(n_nodes, g)
    problem = _alltoall_problem(fn([b.copy() for b in buffers], net, g), expected, marked=False)
    if problem:
        return problem
    item = buffers[0].itemsize
    for link, sent, due, formula in (
            ("over NVLink (inside its node)", net.bytes_sent_intra, (g - 1) * n_nodes * m * item, "(g−1)·N·m"),
            ("across nodes (NIC)", net.bytes_sent_inter, (n_nodes - 1) * g * m * item, "(N−1)·g·m")):
        for rank, value in enumerate(sent):
            if value != due:
                return (f"rank {rank} (node {rank // g}, GPU {rank % g}) sent {int(value)} bytes {link}; the two-level "
                        f"all-to-all sends {formula}·itemsize = {due}")
    rounds = (g - 1) + (n_nodes - 1)
    if net.steps > rounds:
        return f"took {net.steps} rounds; the two-level all-to-all needs (g−1) + (N−1) = {rounds}"
    if p == 1:
        return "ok"
    return _alltoall_problem(fn([b.copy() for b in buffers], _MarkingTwoLevelNetwork(n_nodes, g, MARK), g),
                             expected, marked=True) or "ok"


def check_hierarchical_alltoall(fn: Callable) -> None:
    """``fn(buffers, net, gpus_per_node)`` -> rank j's (p, m) array of every rank's row j: rows regrouped inside
    the node over NVLink, then one bundle per remote node over the NICs."""
    gen = rng()

    def case(n_nodes: int, g: int, m: int, note: str = "", dtype=np.float64) -> Case:
        p = n_nodes * g
        buffers = [gen.standard_normal((p, m)).astype(dtype) for _ in range(p)]
        label = f"{n_nodes} nodes x {g} GPUs, m={m}" + (f", {note}" if note else "")
        return Case(label, (fn, buffers, n_nodes, g), expected="ok",
                    check_result=lambda got: None if got == "ok" else got)

    example = Case("2 nodes x 2 GPUs, m=1 (the example)",
                   (fn, [10.0 * r + np.arange(4.0).reshape(4, 1) for r in range(4)], 2, 2), expected="ok",
                   check_result=lambda got: None if got == "ok" else got)
    cases = [example, case(3, 2, 2), case(1, 4, 2, "one node: NVLink only"), case(4, 1, 3, "one GPU per node"),
             case(1, 1, 2), case(2, 3, 5, "float32", np.float32), case(3, 4, 1), case(2, 8, 2)]
    for _ in range(6):
        cases.append(case(int(gen.integers(2, 6)), int(gen.integers(2, 9)), int(gen.integers(1, 7))))
    check("hierarchical_alltoall", _run_alltoall, cases, compare=_verdict_only, learner=fn)


# --- the cost model ------------------------------------------------------------------------------------
def check_allreduce_time(fn: Callable) -> None:
    """``fn(algorithm, n_bytes, n_ranks, alpha, beta)`` -> seconds under the α-β model."""
    cases = [
        Case("ring, 1 GiB, p=8, α=5 µs, 50 GB/s", ("ring", 2**30, 8, 5e-6, 1 / 50e9),
             expected=14 * 5e-6 + 1.75 * 2**30 / 50e9),
        Case("naive, 1 MB, p=4, α=10 µs, 10 GB/s", ("naive", 1e6, 4, 10e-6, 1e-10), expected=6 * (10e-6 + 1e-4)),
    ]
    for algorithm in cost.ALGORITHMS:  # every algorithm at the boundaries: one rank, powers of two and not
        for p in (1, 2, 3, 6, 8, 12):
            args = (algorithm, 2.0**20, p, 4e-6, 1 / 25e9)
            cases.append(Case(f"{algorithm}, 1 MiB, p={p}, α=4 µs, 25 GB/s", args,
                              expected=float(cost.allreduce_time(*args))))
    g = rng()
    for _ in range(8):
        algorithm = str(g.choice(cost.ALGORITHMS))
        n_bytes, p = float(2 ** g.uniform(8, 32)), int(g.integers(1, 300))
        alpha, beta = float(10 ** g.uniform(-7, -4)), 1 / float(10 ** g.uniform(9, 12))
        expected = float(cost.allreduce_time(algorithm, n_bytes, p, alpha, beta))
        label = f"{algorithm}, n={n_bytes:.4g} B, p={p}, α={alpha:.3g}, β={beta:.3g}"
        cases.append(Case(label, (algorithm, n_bytes, p, alpha, beta), expected=expected))
    check("allreduce_time", fn, cases,
          compare=lambda got, exp: is_number(got) and bool(np.isclose(float(got), exp, rtol=1e-6, atol=0)))
