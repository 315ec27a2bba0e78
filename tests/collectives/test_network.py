"""Does the simulated network keep the single-port rule, count bytes, and refuse malformed buffers?"""

import numpy as np
import pytest

from mlsys_lab.collectives.network import Network, TwoLevelNetwork, array_module, check_buffers


def test_network_enforces_one_message_per_rank_per_round():
    net = Network(3)
    with pytest.raises(ValueError, match="at most one"):
        net.exchange([(0, 1, np.ones(2)), (0, 2, np.ones(2))])
    with pytest.raises(ValueError, match="itself"):
        net.exchange([(1, 1, np.ones(2))])
    with pytest.raises(ValueError, match="dst"):
        net.exchange([(0, 5, np.ones(2))])


def test_network_counts_bytes_and_rounds():
    """Round 1: 0→1 (3 float64) and 1→2 (1 float64); round 2: 2→0 (2 int32). α-β: 2α + β·(24 + 8) bytes."""
    net = Network(3)
    got = net.exchange([(0, 1, np.ones(3)), (1, 2, np.ones(1))])
    net.exchange([(2, 0, np.ones(2, np.int32))])
    assert [g.tolist() for g in got] == [[1.0, 1.0, 1.0], [1.0]]
    assert net.bytes_sent.tolist() == [24, 8, 8] and net.bytes_received.tolist() == [8, 24, 8]
    assert net.steps == 2 and net.round_max_bytes == [24, 8]
    assert net.time_seconds(alpha=1.0, beta=0.5) == 2 + 0.5 * 32


def test_messages_are_copies():
    net = Network(2)
    data = np.zeros(2)
    received = net.exchange([(0, 1, data)])[0]
    data[0] = 7.0
    assert received[0] == 0.0


def test_bad_buffers_are_named():
    with pytest.raises(ValueError, match="same length"):
        check_buffers([np.ones(3), np.ones(4)])
    with pytest.raises(ValueError, match="non-empty list"):
        check_buffers([])
    with pytest.raises(ValueError, match="1-D"):
        check_buffers([np.ones((2, 2))])
    assert [b.tolist() for b in check_buffers([[1, 2], [3]], same_length=False)] == [[1, 2], [3]]


def test_host_arrays_stay_numpy():
    assert array_module(np.ones(2)) is np and array_module([1, 2]) is np


def test_two_level_network_books_bytes_per_link_class():
    """2 nodes x 2 GPUs: 0→1 stays in node 0 (NVLink), 1→2 crosses (NIC); the round costs its slower class."""
    net = TwoLevelNetwork(2, 2)
    net.exchange([(0, 1, np.ones(4)), (1, 2, np.ones(2))])
    net.exchange([(3, 2, np.ones(1))])
    assert [net.node_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert net.bytes_sent_intra.tolist() == [32, 0, 0, 8] and net.bytes_sent_inter.tolist() == [0, 16, 0, 0]
    assert net.round_max_bytes_by_class == [(32, 16), (8, None)]
    # round 1: max(1 + 0.1·32, 5 + 1·16) = 21; round 2: NVLink only, 1 + 0.1·8
    assert net.two_level_seconds(1.0, 0.1, 5.0, 1.0) == pytest.approx(21 + 1.8)
    with pytest.raises(ValueError, match="gpus_per_node"):
        TwoLevelNetwork(2, 0)
    with pytest.raises(ValueError, match="beta_inter"):
        net.two_level_seconds(1.0, 0.1, 5.0, -1.0)


def _two_level_allreduce(buffers, net, g):
    """Reduce-scatter in the node, ring all-reduce of the shard across nodes, all-gather in the node."""
    p = len(buffers)
    n_nodes = p // g
    node, local = [r // g for r in range(p)], [r % g for r in range(p)]
    in_node = [node[r] * g + (local[r] + 1) % g for r in range(p)]
    across = [(node[r] + 1) % n_nodes * g + local[r] for r in range(p)]

    def ring(chunks, right, position, k, offset, add):
        for s in range(k - 1):
            messages = [(r, right[r], chunks[r][(position[r] + offset - s) % k]) for r in range(p)]
            for (src, dst, _), data in zip(messages, net.exchange(messages), strict=True):
                target = chunks[dst][(position[src] + offset - s) % k]
                target[...] = target + data if add else data

    work = [np.array(b, copy=True) for b in buffers]
    shards = [np.array_split(w, g) for w in work]
    ring(shards, in_node, local, g, 0, True)
    pieces = [np.array_split(shards[r][(local[r] + 1) % g], n_nodes) for r in range(p)]
    ring(pieces, across, node, n_nodes, 0, True)
    ring(pieces, across, node, n_nodes, 1, False)
    ring(shards, in_node, local, g, 1, False)
    return work


@pytest.mark.parametrize(("n_nodes", "g"), [(2, 4), (3, 2), (4, 8), (1, 4), (4, 1)])
def test_two_level_simulation_costs_what_the_closed_form_says(n_nodes, g):
    """The rounds priced per link class sum to cost.hierarchical_allreduce_time (n divisible by N·g)."""
    from mlsys_lab.collectives import cost

    n = 8 * n_nodes * g
    buffers = [np.random.default_rng(r).standard_normal(n) for r in range(n_nodes * g)]
    net = TwoLevelNetwork(n_nodes, g)
    out = _two_level_allreduce(buffers, net, g)
    for result in out:
        np.testing.assert_allclose(result, np.sum(buffers, axis=0))
    links = dict(alpha_intra=2e-6, beta_intra=1 / 450e9, alpha_inter=10e-6, beta_inter=1 / 50e9)
    assert net.two_level_seconds(**links) == pytest.approx(
        cost.hierarchical_allreduce_time(8.0 * n, n_nodes, g, **links), rel=1e-12)
