"""Does the α-β model give the hand-worked figures, and do its derived quantities hold together?"""

import numpy as np
import pytest

from mlsys_lab.collectives import cost


def test_ring_hand_worked():
    """p = 8, 1 GiB, α = 5 µs, 50 GB/s: 14 start-ups + 2·7/8 · 2^30 / 50e9 s."""
    expected = 14 * 5e-6 + 1.75 * 2**30 / 50e9
    assert cost.allreduce_time("ring", 2**30, 8, 5e-6, 1 / 50e9) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("algorithm", "p", "coefficients"),
    [
        ("naive", 4, (6, 6)),
        ("ring", 4, (6, 1.5)),
        ("tree", 5, (6, 6)),  # ⌈log2 5⌉ = 3
        ("halving_doubling", 8, (6, 1.75)),
        ("halving_doubling", 6, (4 + 2, 1.5 + 2)),  # p' = 4, plus fold in and out
        ("ring", 1, (0, 0)),
    ],
)
def test_coefficients_hand_worked(algorithm, p, coefficients):
    assert cost.allreduce_coefficients(algorithm, p) == pytest.approx(coefficients)


def test_time_is_vectorized_over_sizes():
    sizes = np.array([0, 1e3, 1e6])
    times = cost.allreduce_time("tree", sizes, 4, 1e-6, 1e-9)
    assert times.shape == (3,) and times[0] == pytest.approx(4e-6)


def test_crossover_makes_times_equal():
    n_star = cost.crossover_bytes("tree", "ring", 64, 10e-6, 1 / 50e9)
    assert np.isfinite(n_star)
    assert cost.allreduce_time("tree", n_star, 64, 10e-6, 1 / 50e9) == pytest.approx(
        cost.allreduce_time("ring", n_star, 64, 10e-6, 1 / 50e9)
    )
    assert cost.best_algorithm(n_star / 10, 64, 10e-6, 1 / 50e9) != "ring"
    assert np.isnan(cost.crossover_bytes("ring", "ring", 8, 1e-6, 1e-9))


def test_ring_balance_point_is_p_alpha_over_beta():
    assert cost.latency_bandwidth_balance_bytes("ring", 16, 2e-6, 1e-10) == pytest.approx(16 * 2e-6 / 1e-10)


def test_bus_bandwidth_factors_from_nccl_tests():
    """nccl-tests PERFORMANCE.md: all-reduce busbw = algbw · 2(n−1)/n; all-gather (n−1)/n; broadcast 1."""
    assert cost.bus_bandwidth("all_reduce", 1e9, 0.01, 8) == pytest.approx(1e11 * 14 / 8)
    assert cost.bus_bandwidth("all_gather", 1e9, 0.01, 4) == pytest.approx(1e11 * 3 / 4)
    assert cost.bus_bandwidth("broadcast", 1e9, 0.01, 4) == pytest.approx(1e11)
    assert cost.algorithm_bandwidth(1e9, 0.5) == pytest.approx(2e9)


def test_ring_busbw_equals_link_bandwidth_for_large_messages():
    """The point of busbw: for a bandwidth-bound ring it reads the link speed whatever p is."""
    for p in (2, 8, 64):
        t = cost.allreduce_time("ring", 2**34, p, 0.0, 1 / 100e9)
        assert cost.bus_bandwidth("all_reduce", 2**34, t, p) == pytest.approx(100e9)


def test_fit_recovers_alpha_beta():
    sizes = np.logspace(3, 8, 12)
    seconds = cost.allreduce_time("ring", sizes, 4, 7e-6, 2e-10) * (
        1 + 0.01 * np.random.default_rng(0).standard_normal(12)
    )
    alpha, beta = cost.fit_alpha_beta(sizes, seconds, "ring", 4)
    assert alpha == pytest.approx(7e-6, rel=0.05) and beta == pytest.approx(2e-10, rel=0.05)


def test_collective_times_hand_worked():
    assert cost.collective_time("all_gather", 800, 4, 1.0, 1.0) == pytest.approx(3 * (1 + 200))
    assert cost.collective_time("broadcast", 10, 8, 1.0, 0.1) == pytest.approx(3 * 2)
    assert cost.collective_time("all_reduce", 10, 8, 1.0, 0.1) == cost.allreduce_time("ring", 10, 8, 1.0, 0.1)


def test_hierarchical_allreduce_beats_flat_ring_across_nodes():
    """8 nodes × 8 GPUs, NVLink 450 GB/s inside, 50 GB/s between: the two-level ring moves 1/8 over IB."""
    args = dict(n_nodes=8, gpus_per_node=8)
    flat = cost.flat_ring_allreduce_time(2**30, alpha_inter=5e-6, beta_inter=1 / 50e9, **args)
    two_level = cost.hierarchical_allreduce_time(
        2**30, alpha_intra=2e-6, beta_intra=1 / 450e9, alpha_inter=5e-6, beta_inter=1 / 50e9, **args
    )
    hand = 2 * 7 * (2e-6 + 2**30 / 8 / 450e9) + 2 * 7 * (5e-6 + 2**30 / 64 / 50e9)
    assert two_level == pytest.approx(hand)
    assert two_level < flat


def test_flat_ring_channels_hand_worked():
    """8 nodes × 8 H200: 8 channels, one per 50 GB/s NIC, cross a node at 400 GB/s (under NVLink's 450)."""
    args = dict(n_nodes=8, gpus_per_node=8, alpha_inter=10e-6, beta_inter=1 / 50e9)
    one = cost.flat_ring_allreduce_time(2**30, **args)
    eight = cost.flat_ring_allreduce_time(2**30, **args, n_channels=8, beta_intra=1 / 450e9)
    assert one == pytest.approx(126 * 10e-6 + 2 * 63 / 64 * 2**30 / 50e9)  # the single-ring strawman
    assert one == cost.allreduce_time("ring", 2**30, 64, 10e-6, 1 / 50e9)
    assert eight == pytest.approx(126 * 10e-6 + 2 * 63 / 64 * 2**30 / 400e9)
    # 16 channels would offer 800 GB/s, but every GPU's bytes still cross its NVLink: capped at 450 GB/s
    sixteen = cost.flat_ring_allreduce_time(2**30, **args, n_channels=16, beta_intra=1 / 450e9)
    assert sixteen == pytest.approx(126 * 10e-6 + 2 * 63 / 64 * 2**30 / 450e9)
    # channels change the bandwidth term only: a tiny message costs the same 126 start-ups either way
    assert cost.flat_ring_allreduce_time(0, **args, n_channels=8) == pytest.approx(126 * 10e-6)
    with pytest.raises(ValueError, match="n_channels"):
        cost.flat_ring_allreduce_time(1, **args, n_channels=0)


def test_hierarchical_allreduce_shares_fewer_nics():
    """g = 8 inter-node rings of n/8 on 2 NICs: each NIC carries 4 of them, the inter-node term ×4."""
    args = dict(n_nodes=4, gpus_per_node=8, alpha_intra=0.0, beta_intra=1 / 450e9, alpha_inter=0.0,
                beta_inter=1 / 50e9)
    intra = 2 * 7 * 2**30 / 8 / 450e9
    inter = 2 * 3 / 4 * 2**30 / 8 / 50e9
    assert cost.hierarchical_allreduce_time(2**30, **args) == pytest.approx(intra + inter)
    assert cost.hierarchical_allreduce_time(2**30, **args, nics_per_node=2) == pytest.approx(intra + 4 * inter)
    with pytest.raises(ValueError, match="nics_per_node"):
        cost.hierarchical_allreduce_time(1, **args, nics_per_node=9)


def test_hierarchical_alltoall_cuts_inter_node_startups():
    """Small messages: start-ups dominate; the two-level scheme pays N−1 instead of P−g across nodes."""
    args = dict(
        n_nodes=16,
        gpus_per_node=8,
        alpha_intra=1e-6,
        beta_intra=1 / 450e9,
        alpha_inter=10e-6,
        beta_inter=1 / 50e9,
    )
    flat, two = cost.flat_alltoall_time(64 * 1024, **args), cost.hierarchical_alltoall_time(64 * 1024, **args)
    assert flat == pytest.approx(7 * (1e-6 + 512 / 450e9) + 120 * (10e-6 + 512 / 50e9))
    assert two == pytest.approx(7 * (1e-6 + 8192 / 450e9) + 15 * (10e-6 + 4096 / 50e9))
    assert flat / two > 5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: cost.allreduce_time("butterfly", 1, 2, 1, 1), "algorithm"),
        (lambda: cost.allreduce_time("ring", -1, 2, 1, 1), "n_bytes"),
        (lambda: cost.allreduce_time("ring", 1, 0, 1, 1), "n_ranks"),
        (lambda: cost.allreduce_time("ring", 1, 2, -1, 1), "alpha"),
        (lambda: cost.bus_bandwidth("gather", 1, 1, 2), "collective"),
        (lambda: cost.fit_alpha_beta([1], [1]), "n_bytes and seconds"),
    ],
)
def test_bad_inputs_name_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
