"""Checks for the exercises of 07_collectives."""

from __future__ import annotations

import numpy as np

from mlsys_lab.collectives import cost
from mlsys_lab.collectives.network import Network
from mlsys_lab.exercises import Case, check, rng


def _ring_budget(net: Network, p: int, n: int, itemsize: int):
    """A check_result: every rank sent what a ring sends (up to chunk rounding) in at most 2(p−1) rounds."""

    def verdict(_result) -> str | None:
        low, high = 2 * (p - 1) * (n // p) * itemsize, 2 * (p - 1) * -(-n // p) * itemsize
        for rank, sent in enumerate(net.bytes_sent):
            if not low <= sent <= high:
                uneven = f" (between {low} and {high} with uneven chunks)" if low != high else ""
                return (
                    f"rank {rank} sent {int(sent)} bytes; a ring sends 2(p−1)/p·n·itemsize = "
                    f"{2 * (p - 1) * n * itemsize / p:.0f}{uneven}"
                )
        if net.steps > 2 * (p - 1):
            return f"took {net.steps} rounds; the ring needs 2(p−1) = {2 * (p - 1)}"
        return None

    return verdict


def _ring_case(label: str, buffers: list[np.ndarray]) -> Case:
    p, n = len(buffers), len(buffers[0])
    net = Network(p)
    total = np.sum(buffers, axis=0) if n else np.zeros(0)
    return Case(
        label,
        ([b.copy() for b in buffers], net),
        expected=[total] * p,
        check_result=_ring_budget(net, p, n, buffers[0].itemsize),
    )


def check_ring_allreduce(fn) -> None:
    """``fn(buffers, net)`` -> one array per rank, each the sum; all traffic goes through ``net.exchange``."""
    g = rng()
    cases = [
        _ring_case("p=4, n=8", [np.arange(8.0) + 10 * r for r in range(4)]),
        _ring_case("p=3, n=7", [np.arange(7.0) * (r + 1) for r in range(3)]),
        _ring_case("p=1, n=5", [np.arange(5.0)]),
    ]
    for _ in range(9):
        p, n = int(g.integers(2, 13)), int(g.integers(0, 301))
        cases.append(_ring_case(f"p={p}, n={n}", [g.standard_normal(n) for _ in range(p)]))
    check("ring_allreduce", fn, cases)


def check_allreduce_time(fn) -> None:
    """``fn(algorithm, n_bytes, n_ranks, alpha, beta)`` -> seconds under the α-β model."""
    cases = [
        Case(
            "ring, 1 GiB, p=8, α=5 µs, 50 GB/s",
            ("ring", 2**30, 8, 5e-6, 1 / 50e9),
            expected=14 * 5e-6 + 1.75 * 2**30 / 50e9,
        ),
        Case(
            "naive, 1 MB, p=4, α=10 µs, 10 GB/s", ("naive", 1e6, 4, 10e-6, 1e-10), expected=6 * (10e-6 + 1e-4)
        ),
    ]
    g = rng()
    for _ in range(12):
        algorithm = str(g.choice(cost.ALGORITHMS))
        n_bytes, p = float(2 ** g.uniform(8, 32)), int(g.integers(1, 300))
        alpha, beta = float(10 ** g.uniform(-7, -4)), 1 / float(10 ** g.uniform(9, 12))
        expected = float(cost.allreduce_time(algorithm, n_bytes, p, alpha, beta))
        label = f"{algorithm}, n={n_bytes:.4g} B, p={p}, α={alpha:.3g}, β={beta:.3g}"
        cases.append(Case(label, (algorithm, n_bytes, p, alpha, beta), expected=expected))
    check(
        "allreduce_time", fn, cases, compare=lambda got, exp: np.isclose(float(got), exp, rtol=1e-6, atol=0)
    )


def check_bus_bandwidth(fn) -> None:
    """``fn(collective, n_bytes, seconds, n_ranks)`` -> bus bandwidth in bytes/s, as nccl-tests reports it."""
    cases = [
        Case("all_reduce, 1 GB in 10 ms, p=8", ("all_reduce", 1e9, 0.01, 8), expected=1e11 * 1.75),
        Case("broadcast, 1 GB in 10 ms, p=8", ("broadcast", 1e9, 0.01, 8), expected=1e11),
    ]
    g = rng()
    for _ in range(10):
        collective = str(g.choice(list(cost.BUS_FACTOR)))
        n_bytes, seconds, p = (
            float(2 ** g.uniform(10, 34)),
            float(10 ** g.uniform(-5, 0)),
            int(g.integers(1, 1025)),
        )
        expected = float(cost.bus_bandwidth(collective, n_bytes, seconds, p))
        cases.append(
            Case(
                f"{collective}, n={n_bytes:.4g} B, t={seconds:.3g} s, p={p}",
                (collective, n_bytes, seconds, p),
                expected=expected,
            )
        )
    check("bus_bandwidth", fn, cases, compare=lambda got, exp: np.isclose(float(got), exp, rtol=1e-6, atol=0))
