"""The α-β (latency-bandwidth) cost model of collectives.

Sending m bytes costs α + β·m (Hockney 1994): α is the start-up latency in seconds, β the seconds per
byte (1 / link bandwidth). Every all-reduce algorithm here costs ``a·α + b·n·β`` for n bytes on p
ranks; :func:`allreduce_coefficients` gives (a, b), following Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005):

=================  ===================  =====================  ==========================
algorithm          a (latency terms)    b (bytes per n)        note
=================  ===================  =====================  ==========================
naive              2(p−1)               2(p−1)                 gather to rank 0 + send back
ring               2(p−1)               2(p−1)/p               bandwidth-optimal
tree (binomial)    2⌈log2 p⌉            2⌈log2 p⌉              reduce + broadcast
halving_doubling   2·log2 p'            2(p'−1)/p'             Rabenseifner; p' = 2^⌊log2 p⌋,
                   (+2 if p ≠ p')       (+2 if p ≠ p')         extra ranks fold in and out
=================  ===================  =====================  ==========================

They are exactly the rounds that :mod:`mlsys_lab.collectives.simulate` counts (tests check this).
"""

from __future__ import annotations

import math

import numpy as np

from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_positive

ALGORITHMS = ("naive", "ring", "tree", "halving_doubling")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")


def _ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


def allreduce_coefficients(algorithm: str, n_ranks: int) -> tuple[float, float]:
    """(a, b) such that an all-reduce of n bytes costs a·α + b·n·β (table in the module docstring)."""
    check_choice("algorithm", algorithm, ALGORITHMS)
    p = check_int("n_ranks", n_ranks, low=1)
    if p == 1:
        return 0.0, 0.0
    if algorithm == "naive":
        return 2.0 * (p - 1), 2.0 * (p - 1)
    if algorithm == "ring":
        return 2.0 * (p - 1), 2.0 * (p - 1) / p
    if algorithm == "tree":
        return 2.0 * _ceil_log2(p), 2.0 * _ceil_log2(p)
    p2 = 1 << (p.bit_length() - 1)
    fold = 2.0 if p2 != p else 0.0
    return 2.0 * math.log2(p2) + fold, 2.0 * (p2 - 1) / p2 + fold


def allreduce_time(algorithm: str, n_bytes, n_ranks: int, alpha: float, beta: float):
    """Seconds to all-reduce ``n_bytes`` (scalar or array) on ``n_ranks``: a·α + b·n_bytes·β.

    ``alpha`` in seconds, ``beta`` in seconds per byte (1 / bandwidth_bytes_per_s).
    """
    check_finite("alpha", alpha, low=0)
    check_finite("beta", beta, low=0)
    n_bytes = _check_bytes(n_bytes)
    a, b = allreduce_coefficients(algorithm, n_ranks)
    return a * alpha + b * n_bytes * beta


def collective_time(collective: str, n_bytes, n_ranks: int, alpha: float, beta: float):
    """Seconds for one collective of ``n_bytes`` per rank (the full vector) with the ring or tree schedule.

    reduce_scatter, all_gather: (p−1)(α + n/p·β) (ring); broadcast, reduce: ⌈log2 p⌉(α + n·β)
    (binomial tree); all_to_all: (p−1)(α + n/p·β) (pairwise exchange); all_reduce: the ring.
    """
    check_choice("collective", collective, COLLECTIVES)
    check_finite("alpha", alpha, low=0)
    check_finite("beta", beta, low=0)
    n_bytes = _check_bytes(n_bytes)
    p = check_int("n_ranks", n_ranks, low=1)
    if collective == "all_reduce":
        return allreduce_time("ring", n_bytes, p, alpha, beta)
    if collective in ("broadcast", "reduce"):
        return _ceil_log2(p) * (alpha + n_bytes * beta)
    return (p - 1) * (alpha + n_bytes / p * beta)


def _check_bytes(n_bytes, name: str = "n_bytes", positive: bool = False):
    """A size (or seconds) in bytes, scalar or array: numbers, finite, >= 0 (> 0 with ``positive``)."""
    array = np.asarray(check_array(name, n_bytes, kinds="fiu", min_size=0), dtype=float)
    if np.any(~np.isfinite(array)) or np.any(array <= 0 if positive else array < 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'} and finite; got {n_bytes!r:.80}")
    return array if array.ndim else float(array)


# --- what NCCL reports ------------------------------------------------------------------------------
BUS_FACTOR = {  # nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
}


def algorithm_bandwidth(n_bytes, seconds):
    """algbw = n_bytes / seconds (bytes per second): the size of the vector over the time."""
    seconds = _check_bytes(seconds, "seconds", positive=True)
    return _check_bytes(n_bytes) / np.asarray(seconds, dtype=float)


def bus_bandwidth(collective: str, n_bytes, seconds, n_ranks: int):
    """busbw = algbw × factor (nccl-tests): the per-link rate, comparable to the hardware peak.

    all_reduce: 2(p−1)/p; reduce_scatter, all_gather, all_to_all: (p−1)/p; broadcast, reduce: 1.
    ``n_bytes`` is the size nccl-tests prints: the vector every rank holds for all_reduce, broadcast and
    reduce, and the *gathered* (total) vector for all_gather and reduce_scatter, of which each rank holds n/p.
    """
    check_choice("collective", collective, BUS_FACTOR)
    p = check_int("n_ranks", n_ranks, low=1)
    return algorithm_bandwidth(n_bytes, seconds) * BUS_FACTOR[collective](p)


# --- crossovers -----------------------------------------------------------------------------------------
def crossover_bytes(algorithm_a: str, algorithm_b: str, n_ranks: int, alpha: float, beta: float) -> float:
    """The message size where two all-reduce algorithms take the same time (nan if they never cross).

    a_A·α + b_A·n·β = a_B·α + b_B·n·β  ⇒  n* = (a_B − a_A)·α / ((b_A − b_B)·β).
    """
    check_finite("alpha", alpha, low=0, low_inclusive=False)
    check_finite("beta", beta, low=0, low_inclusive=False)
    check_choice("algorithm_a", algorithm_a, ALGORITHMS)
    check_choice("algorithm_b", algorithm_b, ALGORITHMS)
    a1, b1 = allreduce_coefficients(algorithm_a, n_ranks)
    a2, b2 = allreduce_coefficients(algorithm_b, n_ranks)
    if b1 == b2:
        return float("nan")
    n_star = (a2 - a1) * alpha / ((b1 - b2) * beta)
    return float(n_star) if n_star > 0 else float("nan")


def latency_bandwidth_balance_bytes(algorithm: str, n_ranks: int, alpha: float, beta: float) -> float:
    """The size where the latency term a·α equals the bandwidth term b·n·β: below it, latency-bound.

    For the ring: n½ = 2(p−1)α / (2(p−1)/p·β) = p·α/β, which grows with the rank count.
    """
    check_finite("alpha", alpha, low=0, low_inclusive=False)
    check_finite("beta", beta, low=0, low_inclusive=False)
    a, b = allreduce_coefficients(algorithm, n_ranks)
    return a * alpha / (b * beta) if b else float("nan")


def best_algorithm(n_bytes: float, n_ranks: int, alpha: float, beta: float) -> str:
    """The all-reduce algorithm with the smallest α-β time for this size."""
    n_bytes = _check_bytes(n_bytes)
    if not isinstance(n_bytes, float):
        raise TypeError(f"n_bytes must be one size (a number), not an array of shape {n_bytes.shape}")
    times = {name: float(allreduce_time(name, n_bytes, n_ranks, alpha, beta)) for name in ALGORITHMS}
    return min(times, key=times.get)


def fit_alpha_beta(n_bytes, seconds, algorithm: str = "ring", n_ranks: int = 2) -> tuple[float, float]:
    """Least-squares α and β from measured times: seconds ≈ a·α + b·n_bytes·β.

    Fits relative error (each row divided by its time) so that small and large messages weigh the
    same; returns (alpha_seconds, beta_seconds_per_byte).
    """
    n_bytes = np.atleast_1d(_check_bytes(n_bytes))
    seconds = np.atleast_1d(_check_bytes(seconds, "seconds", positive=True))
    if n_bytes.shape != seconds.shape or n_bytes.size < 2:
        raise ValueError(
            f"n_bytes and seconds must be equal-length arrays of >= 2 points; got {n_bytes.shape} "
            f"and {seconds.shape}"
        )
    check_positive("seconds", float(seconds.min()))
    a, b = allreduce_coefficients(algorithm, n_ranks)
    design = np.stack([np.full_like(n_bytes, a), b * n_bytes], axis=1) / seconds[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return float(max(alpha, 0.0)), float(max(beta, 0.0))


# --- two-level (hierarchical) collectives ----------------------------------------------------------------
def hierarchical_allreduce_time(
    n_bytes,
    n_nodes: int,
    gpus_per_node: int,
    alpha_intra: float,
    beta_intra: float,
    alpha_inter: float,
    beta_inter: float,
    nics_per_node: int | None = None,
):
    """Reduce-scatter inside each node, ring all-reduce of n/g across nodes, all-gather inside the node.

    t = 2(g−1)(α_i + n/g·β_i) + 2(N−1)(α_x + n/(gN)·β_x·g/k): each inter-node ring carries only 1/g of
    the vector, and the g rings (one per local GPU) share the node's k = ``nics_per_node`` NICs
    (default g: one NIC per GPU, as on DGX A100/H100/H200, so all g run at full NIC speed). The three
    phases run one after the other; NCCL's flat rings pipeline them instead
    (:func:`flat_ring_allreduce_time` with ``n_channels``).
    """
    n_bytes = _check_bytes(n_bytes)
    nodes = check_int("n_nodes", n_nodes, low=1)
    g = check_int("gpus_per_node", gpus_per_node, low=1)
    nics = g if nics_per_node is None else check_int("nics_per_node", nics_per_node, low=1, high=g)
    alpha_intra = check_finite("alpha_intra", alpha_intra, low=0.0)
    beta_intra = check_finite("beta_intra", beta_intra, low=0.0)
    alpha_inter = check_finite("alpha_inter", alpha_inter, low=0.0)
    beta_inter = check_finite("beta_inter", beta_inter, low=0.0)
    intra = 2 * (g - 1) * (alpha_intra + n_bytes / g * beta_intra)
    return intra + allreduce_time("ring", n_bytes / g, nodes, alpha_inter, beta_inter * g / nics)


def _check_link_terms(alpha_intra, beta_intra, alpha_inter, beta_inter) -> None:
    for label, value in (("alpha_intra", alpha_intra), ("beta_intra", beta_intra), ("alpha_inter", alpha_inter),
                         ("beta_inter", beta_inter)):
        check_finite(label, value, low=0.0)


def flat_ring_allreduce_time(
    n_bytes,
    n_nodes: int,
    gpus_per_node: int,
    alpha_inter: float,
    beta_inter: float,
    n_channels: int = 1,
    beta_intra: float = 0.0,
):
    """A ring over all P = N·g GPUs, split into ``n_channels`` rings that leave each node on different NICs.

    t = 2(P−1)·α_x + 2(P−1)/P·n·max(β_x / C, β_i).

    NCCL splits a collective into C *channels*, each a ring over every GPU carrying n/C bytes. On an
    NVLink node a channel enters the node through one NIC, visits the local GPUs over NVLink and
    leaves through another, so with one NIC per channel the node's C NICs carry the C channels side
    by side (S. Jeaugey, NVIDIA/nccl issue #412: "data can flow from the NIC to the nearest GPU, go
    through all the other GPUs through NVLink, then exit from the last GPU, back to the NIC", and
    "NCCL is able to aggregate the bandwidth of multiple NICs, but that requires ... NVLink with a
    bandwidth that matches or exceeds the sum of the bandwidth of all NICs"). A node then crosses at
    C/β_x bytes/s; each GPU still sends its 2(P−1)/P·n bytes, most of them over NVLink, which caps the
    rate at 1/β_i (``beta_intra``, 0 for no cap). Latency: every step of a channel waits for its
    slowest hop, 2(P−1)·α_x. ``n_channels = 1`` (the default) is the single ring that runs all P GPUs
    at one NIC's speed: the strawman that NCCL does not build on a multi-NIC node.
    """
    p = check_int("n_nodes", n_nodes, low=1) * check_int("gpus_per_node", gpus_per_node, low=1)
    channels = check_int("n_channels", n_channels, low=1, high=1024)
    check_finite("alpha_inter", alpha_inter, low=0.0)
    check_finite("beta_inter", beta_inter, low=0.0)
    check_finite("beta_intra", beta_intra, low=0.0)
    return allreduce_time("ring", n_bytes, p, alpha_inter, max(beta_inter / channels, beta_intra))


def flat_alltoall_time(
    n_bytes,
    n_nodes: int,
    gpus_per_node: int,
    alpha_intra: float,
    beta_intra: float,
    alpha_inter: float,
    beta_inter: float,
):
    """Pairwise all-to-all over P = N·g GPUs: g−1 rounds on NVLink, P−g across nodes, n/P bytes each."""
    n_bytes = _check_bytes(n_bytes)
    g = check_int("gpus_per_node", gpus_per_node, low=1)
    p = check_int("n_nodes", n_nodes, low=1) * g
    _check_link_terms(alpha_intra, beta_intra, alpha_inter, beta_inter)
    return (g - 1) * (alpha_intra + n_bytes / p * beta_intra) + (p - g) * (
        alpha_inter + n_bytes / p * beta_inter
    )


def hierarchical_alltoall_time(
    n_bytes,
    n_nodes: int,
    gpus_per_node: int,
    alpha_intra: float,
    beta_intra: float,
    alpha_inter: float,
    beta_inter: float,
):
    """Two-level all-to-all: gather inside the node by destination, then one exchange per remote node.

    Phase 1 (NVLink): g−1 rounds of n/g bytes; phase 2 (InfiniBand): N−1 rounds of n/N bytes between
    GPUs with the same local index. Inter-node start-ups drop from P−g to N−1.
    """
    n_bytes = _check_bytes(n_bytes)
    nodes = check_int("n_nodes", n_nodes, low=1)
    g = check_int("gpus_per_node", gpus_per_node, low=1)
    _check_link_terms(alpha_intra, beta_intra, alpha_inter, beta_inter)
    return (g - 1) * (alpha_intra + n_bytes / g * beta_intra) + (nodes - 1) * (
        alpha_inter + n_bytes / nodes * beta_inter
    )
