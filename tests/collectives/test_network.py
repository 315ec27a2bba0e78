"""Does the simulated network keep the single-port rule, count bytes, and refuse malformed buffers?"""

import numpy as np
import pytest

from mlsys_lab.collectives.network import Network, array_module, check_buffers


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
