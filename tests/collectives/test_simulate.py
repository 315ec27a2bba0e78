"""Do the simulated collectives equal their definitions, and do they move the bytes the theory says?"""

import numpy as np
import pytest

from mlsys_lab.collectives import cost, simulate

RNG = np.random.default_rng(7)
SHAPES = [
    (int(p), int(n)) for p, n in zip(RNG.integers(1, 17, 40), RNG.integers(0, 1001, 40), strict=True)
] + [
    (1, 0),
    (16, 1000),
    (16, 3),
    (5, 0),
]


def _buffers(p, n, seed, dtype=np.float64):
    g = np.random.default_rng(seed)
    return [g.integers(-100, 100, n).astype(dtype) for _ in range(p)]  # integers: sums are exact


@pytest.mark.parametrize("algorithm", list(simulate.ALLREDUCE_ALGORITHMS))
@pytest.mark.parametrize(("p", "n"), SHAPES)
def test_allreduce_equals_the_sum(algorithm, p, n):
    """Does every rank end with the element-wise sum, for any rank count 1–16 and length 0–1000?"""
    buffers = _buffers(p, n, seed=p * 1000 + n)
    expected = np.sum(buffers, axis=0)
    result = simulate.ALLREDUCE_ALGORITHMS[algorithm](buffers)
    assert len(result.outputs) == p
    for out in result.outputs:
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(("p", "n"), SHAPES)
def test_other_collectives_equal_their_definitions(p, n):
    """Reduce-scatter, all-gather, broadcast, reduce, all-to-all against NumPy one-liners."""
    buffers = _buffers(p, n, seed=n * 17 + p)
    total = np.sum(buffers, axis=0)
    for out, chunk in zip(simulate.reduce_scatter(buffers).outputs, np.array_split(total, p), strict=True):
        np.testing.assert_array_equal(out, chunk)
    ragged = [np.arange(int(k), dtype=float) + 100 * r for r, k in enumerate(RNG.integers(0, 50, p))]
    for out in simulate.all_gather(ragged).outputs:
        np.testing.assert_array_equal(out, np.concatenate(ragged))
    result = simulate.all_to_all(ragged)
    for j, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, np.concatenate([np.array_split(b, p)[j] for b in ragged]))
    root = int(RNG.integers(0, p))
    for out in simulate.broadcast(buffers, root).outputs:
        np.testing.assert_array_equal(out, buffers[root])
    reduced = simulate.reduce(buffers, root).outputs
    np.testing.assert_array_equal(reduced[root], total)
    assert all(out is None for r, out in enumerate(reduced) if r != root)


@pytest.mark.parametrize(("p", "n"), SHAPES)
def test_ring_bytes_per_rank(p, n):
    """Is each rank's traffic 2(p−1)/p × n × itemsize, up to chunk rounding, in 2(p−1) rounds?"""
    result = simulate.ring_allreduce(_buffers(p, n, seed=3, dtype=np.float32))
    ideal = 2 * (p - 1) / p * n * 4
    assert np.all(np.abs(result.bytes_sent - ideal) <= 2 * (p - 1) * 4)
    assert result.bytes_sent.sum() == result.bytes_received.sum()
    assert result.steps == 2 * (p - 1)


def test_ring_bytes_exact_when_p_divides_n():
    result = simulate.ring_allreduce([np.ones(1024, np.float32)] * 8)
    assert np.all(result.bytes_sent == 2 * 7 * 128 * 4)


def test_naive_root_is_the_bottleneck():
    """The notes: rank 0 moves O(P·|g|); every other rank sends |g| once."""
    p, n = 6, 100
    result = simulate.naive_allreduce(_buffers(p, n, 1))
    assert result.bytes_received[0] == (p - 1) * n * 8 and result.bytes_sent[0] == (p - 1) * n * 8
    assert np.all(result.bytes_sent[1:] == n * 8)


def test_reduce_scatter_of_the_notes_schedule_leaves_chunk_r_plus_1_on_rank_r():
    """The notes say GPU_i ends with S_i; with their schedule (send S_i first) it ends with S_(i+1)."""
    p = 4
    result = simulate.ring_allreduce([np.full(p, 1 << r, dtype=np.int64) for r in range(p)], record=True)
    phase, step, values = result.snapshots[p - 1]
    assert (phase, step) == ("reduce-scatter", p - 1)
    full = np.argwhere(np.array(values) == (1 << p) - 1)
    assert [tuple(x) for x in full] == [(r, (r + 1) % p) for r in range(p)]


@pytest.mark.parametrize("algorithm", cost.ALGORITHMS)
@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8, 12, 16])
def test_simulated_rounds_match_the_alpha_beta_formula(algorithm, p):
    """Σ_rounds (α + β·max bytes) of the simulation equals cost.allreduce_time's closed form."""
    n = 16 * 3 * 5 * 7  # divisible by every p2 and p here, so chunks are even
    result = simulate.ALLREDUCE_ALGORITHMS[algorithm]([np.ones(n, np.float32)] * p)
    alpha, beta = 3e-6, 1 / 20e9
    assert result.time_seconds(alpha, beta) == pytest.approx(
        cost.allreduce_time(algorithm, n * 4, p, alpha, beta)
    )


def test_bad_buffers_are_named():
    with pytest.raises(ValueError, match="same length"):
        simulate.ring_allreduce([np.ones(3), np.ones(4)])
    with pytest.raises(ValueError, match="non-empty list"):
        simulate.ring_allreduce([])
    with pytest.raises(ValueError, match="1-D"):
        simulate.tree_allreduce([np.ones((2, 2))])
    with pytest.raises(ValueError, match="root"):
        simulate.broadcast([np.ones(2)] * 3, root=3)


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8])
def test_other_collectives_match_collective_time(p):
    """Simulated rounds of reduce-scatter, all-gather, all-to-all, broadcast, reduce vs collective_time."""
    n = 840  # elements of the full vector; divisible by every p here
    alpha, beta = 2e-6, 1e-9
    full = [np.ones(n, np.float32)] * p
    blocks = [np.ones(n // p, np.float32)] * p
    for name, result in [
        ("reduce_scatter", simulate.reduce_scatter(full)),
        ("all_gather", simulate.all_gather(blocks)),
        ("all_to_all", simulate.all_to_all(full)),
        ("broadcast", simulate.broadcast(full)),
        ("reduce", simulate.reduce(full)),
    ]:
        expected = cost.collective_time(name, n * 4, p, alpha, beta)
        assert result.time_seconds(alpha, beta) == pytest.approx(expected), name


def test_all_to_all_pieces_delivers_what_each_rank_addressed():
    """Pieces of any shape: recv[j][i] = send[i][j]; rank 0 sends 2 + 3 rows of 2 float64 = 80 bytes."""
    send = [[np.full((n, 2), 10.0 * i + j) for j, n in enumerate(row)] for i, row in enumerate([(1, 2, 3),
                                                                                                 (0, 0, 1),
                                                                                                 (4, 0, 0)])]
    result = simulate.all_to_all_pieces(send)
    for i in range(3):
        for j in range(3):
            np.testing.assert_array_equal(result.outputs[j][i], send[i][j])
    assert result.bytes_sent.tolist() == [80, 16, 64] and result.steps == 2
    with pytest.raises(ValueError, match="p x p nested list"):
        simulate.all_to_all_pieces([[np.ones(1)] * 2])


def test_ring_state_fills_one_chunk_per_rank_then_everything():
    p = 5
    middle = simulate.ring_state(p, p - 1)
    assert middle.phase == "reduce-scatter"
    assert [tuple(x) for x in np.argwhere(middle.contributions == p)] == [(r, (r + 1) % p) for r in range(p)]
    end = simulate.ring_state(p, 2 * (p - 1))
    assert end.phase == "all-gather" and np.all(end.contributions == p)
    start = simulate.ring_state(p, 0)
    assert start.phase == "start" and np.all(start.contributions == 1)  # every rank holds only its own input


def test_ring_state_counts_one_chunk_per_round():
    """Round s: every rank has sent s chunks of n/p bytes; at the end 2(p−1)/p·n, 1.5 MiB of 1 MiB on 4 ranks."""
    assert simulate.ring_state(4, 3).bytes_sent_per_rank == 3 * 2**20 / 4
    assert simulate.ring_state(4, 6).bytes_sent_per_rank == 1.5 * 2**20
    assert simulate.ring_state(4, 2, vector_bytes=400).bytes_sent_per_rank == 200
    with pytest.raises(ValueError, match="step must be an integer between 0 and 4; got 9"):
        simulate.ring_state(3, 9)
