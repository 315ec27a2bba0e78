"""Does sequence parallelism give the single-device step while moving exactly TP's activation bytes?"""

import pytest

from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import loss_and_grads, max_relative_error_of_params
from mlsys_lab.parallelism.sp import sp_loss_and_grads
from mlsys_lab.parallelism.tp import tp_loss_and_grads


@pytest.mark.parametrize("n_ranks", [1, 2, 4])
def test_sp_equals_single_device(block_problem, block_config, n_ranks):
    blocks, x, t = block_problem(100 + n_ranks)
    loss, grads = loss_and_grads(x, t, blocks, block_config.head_dim)
    got_loss, got = sp_loss_and_grads(x, t, blocks, block_config.n_heads, n_ranks)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert max_relative_error_of_params(got, grads) < 1e-10


def test_sp_moves_tp_bytes_plus_gain_reduction(block_problem, block_config):
    """All-reduce = reduce-scatter + all-gather: SP's activations move exactly TP's bytes."""
    blocks, x, t = block_problem(6)
    tp_log, sp_log = comm.CommLog(), comm.CommLog()
    tp_loss_and_grads(x, t, blocks, block_config.n_heads, 4, tp_log)
    sp_loss_and_grads(x, t, blocks, block_config.n_heads, 4, sp_log)
    activation_bytes = sp_log.bytes_sent["all_gather"] + sp_log.bytes_sent["reduce_scatter"]
    assert activation_bytes == pytest.approx(tp_log.bytes_sent["all_reduce"])
    assert sp_log.calls["all_reduce"] == 2 * 2  # the two norm gains per block


def test_sp_needs_the_sequence_divided(block_problem, block_config):
    blocks, x, t = block_problem(9)
    with pytest.raises(ValueError, match="n_ranks must divide the sequence length 8"):
        sp_loss_and_grads(x, t, blocks, block_config.n_heads, 3)
