"""Do lesson 08's tensor collectives give the right arrays, run lesson 07's simulation, and log its bytes?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.collectives import simulate
from mlsys_lab.parallelism import comm


def test_collectives_results_and_bytes():
    """Do the simulated collectives return the right arrays and ring byte counts?"""
    g = np.random.default_rng(0)
    bufs = [xp.asarray(g.normal(size=12)) for _ in range(3)]
    total = asnumpy(sum(asnumpy(b) for b in bufs))
    log = comm.CommLog()
    assert all(np.allclose(asnumpy(r), total) for r in comm.all_reduce(bufs, log))
    parts = comm.reduce_scatter(bufs, log=log)
    assert np.allclose(np.concatenate([asnumpy(p) for p in parts]), total)
    gathered = comm.all_gather(parts, log=log)
    assert np.allclose(asnumpy(gathered[2]), total)
    assert log.bytes_sent["all_reduce"] == pytest.approx(2 * 2 / 3 * 96)
    assert log.bytes_sent["reduce_scatter"] + log.bytes_sent["all_gather"] == pytest.approx(2 * 2 / 3 * 96)
    assert dict(log.calls) == {"all_reduce": 1, "reduce_scatter": 1, "all_gather": 1}
    with pytest.raises(ValueError, match="n_parts must divide"):
        comm.partition(bufs[0], 5)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce_scatter_and_all_gather_along_an_axis(axis):
    """Rank r gets slice r of the sum along ``axis``; all-gather puts the slices back in rank order."""
    g = np.random.default_rng(axis)
    bufs = [xp.asarray(g.integers(-9, 9, size=(4, 8, 12)).astype(float)) for _ in range(4)]  # exact sums
    total = sum(asnumpy(b) for b in bufs)
    parts = comm.reduce_scatter(bufs, axis=axis)
    for r, part in enumerate(parts):
        assert np.array_equal(asnumpy(part), np.split(total, 4, axis=axis)[r])
        assert part.flags.c_contiguous
    for full in comm.all_gather(parts, axis=axis):
        assert np.array_equal(asnumpy(full), total)
    with pytest.raises(ValueError, match=r"n_parts must divide array.shape\[1\]=8; got 3"):
        comm.reduce_scatter(bufs[:3], axis=1)


def test_all_reduce_is_lesson_07s_ring():
    """Same numbers and bytes as ``simulate.ring_allreduce`` on the flattened tensors."""
    g = np.random.default_rng(1)
    bufs = [xp.asarray(g.normal(size=(3, 8))) for _ in range(4)]
    log = comm.CommLog()
    out = comm.all_reduce(bufs, log)
    ring = simulate.ring_allreduce([asnumpy(b).ravel() for b in bufs])
    assert all(np.array_equal(asnumpy(o).ravel(), r) for o, r in zip(out, ring.outputs, strict=True))
    assert log.bytes_sent["all_reduce"] == ring.bytes_sent.max() == 2 * 3 / 4 * 24 * 8


def test_the_log_counts_the_busiest_rank_when_chunks_are_uneven():
    """7 elements on 4 ranks: chunks of 2, 2, 2, 1. Rank r sends every chunk but r+1 (reduce-scatter) and
    every chunk but r+2 (all-gather): 14 − 3 = 11 elements for ranks 1 and 2, 10 for ranks 0 and 3."""
    log = comm.CommLog()
    comm.all_reduce([xp.ones(7) for _ in range(4)], log)
    assert log.bytes_sent["all_reduce"] == 11 * 8
    assert 11 * 8 > 2 * 3 / 4 * 7 * 8  # a little more than the even-chunk formula 2(p−1)/p·n


def test_all_to_all_delivers_addressed_pieces_and_logs_the_busiest_sender():
    """recv[j][i] = send[i][j], pieces of any size (rows of 2 floats); the busiest rank, 0, sends 1 + 2 rows."""
    send = [[xp.full((n, 2), float(10 * i + j)) for j, n in enumerate(row)] for i, row in enumerate([(0, 1, 2),
                                                                                                     (2, 3, 0),
                                                                                                     (1, 0, 4)])]
    log = comm.CommLog()
    recv = comm.all_to_all(send, log)
    for i in range(3):
        for j in range(3):
            assert np.array_equal(asnumpy(recv[j][i]), asnumpy(send[i][j]))
    assert log.bytes_sent["all_to_all"] == 3 * 2 * 8  # ranks 0, 1, 2 send 3, 2, 1 rows to the others
    with pytest.raises(ValueError, match="p x p nested list"):
        comm.all_to_all([[xp.ones(1)], [xp.ones(1)]])


def test_partition_replicate_and_send():
    x = xp.arange(12.0).reshape(3, 4)
    assert [asnumpy(p).tolist() for p in comm.partition(x, 2, axis=1)] == [[[0, 1], [4, 5], [8, 9]],
                                                                          [[2, 3], [6, 7], [10, 11]]]
    copies = comm.replicate(x, 3)
    copies[0][0, 0] = 99.0
    assert float(x[0, 0]) == 0.0 and float(copies[1][0, 0]) == 0.0
    log = comm.CommLog()
    comm.send(x, log)
    assert log.bytes_sent["send"] == 96 and log.total_bytes == 96
