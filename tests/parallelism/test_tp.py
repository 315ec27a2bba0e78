"""Does Megatron tensor parallelism give the single-device step, with its 4 all-reduces per layer?"""

import pytest

from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import loss_and_grads, max_relative_error_of_params
from mlsys_lab.parallelism.tp import shard_block, shard_gemm_intensity, time_mlp_shards, tp_loss_and_grads


@pytest.mark.parametrize("n_ranks", [1, 2, 4])
def test_tp_equals_single_device(block_problem, block_config, n_ranks):
    blocks, x, t = block_problem(100 + n_ranks)
    loss, grads = loss_and_grads(x, t, blocks, block_config.head_dim)
    got_loss, got = tp_loss_and_grads(x, t, blocks, block_config.n_heads, n_ranks)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert max_relative_error_of_params(got, grads) < 1e-10


def test_tp_counts_two_all_reduces_per_layer_each_way(block_problem, block_config):
    """Megatron: 2 all-reduces forward + 2 backward per block, each of a (b, s, d) activation."""
    blocks, x, t = block_problem(5, n_layers=3)
    log = comm.CommLog()
    tp_loss_and_grads(x, t, blocks, block_config.n_heads, 4, log)
    assert log.calls["all_reduce"] == 4 * 3
    assert log.bytes_sent["all_reduce"] == pytest.approx(12 * 2 * 3 / 4 * x.nbytes)


def test_shards_split_columns_rows_and_replicate_gains(block_problem, block_config):
    blocks, _, _ = block_problem(1)
    shards = shard_block(blocks[0], 4, block_config.n_heads)
    assert {k: tuple(v.shape) for k, v in shards[0].items()} == {
        "g1": (16,), "wq": (16, 4), "wk": (16, 4), "wv": (16, 4), "wo": (4, 16), "g2": (16,), "w1": (16, 8),
        "w2": (8, 16)}


def test_bad_degree_is_named(block_problem, block_config):
    blocks, x, t = block_problem(9)
    with pytest.raises(ValueError, match="n_ranks must divide n_heads=4"):
        tp_loss_and_grads(x, t, blocks, block_config.n_heads, 3)


def test_shard_gemm_intensity_hand_values():
    """(1, h)·(h, 4h): 8h² FLOP over 2(h + 4h² + 4h) bytes -> ~1 FLOP/byte; thinner shards, lower intensity."""
    h = 1024
    assert shard_gemm_intensity(1, h, 1) == pytest.approx(8 * h * h / (2 * (h + 4 * h * h + 4 * h)))
    assert shard_gemm_intensity(2048, h, 8) < shard_gemm_intensity(2048, h, 1)


def test_time_mlp_shards_times_each_degree():
    timings = time_mlp_shards(8, 16, (1, 2), repeat=2)
    assert sorted(timings) == [1, 2] and all(t.median > 0 for t in timings.values())
    with pytest.raises(ValueError, match="t must divide 4·hidden=64"):
        time_mlp_shards(8, 16, (3,), repeat=1)
