"""Do the pipeline schedules idle as the bubble formula says, stash what they should, and compute the step?"""

import pytest

from mlsys_lab.parallelism.model import loss_and_grads, max_relative_error_of_params
from mlsys_lab.parallelism.pp import (
    peak_stashed_microbatches,
    pipeline_bubble_fraction,
    pipeline_loss_and_grads,
    schedule_ops,
    simulate_schedule,
)
from mlsys_lab.parallelism.timeline import stream_idle_fraction


@pytest.mark.parametrize("schedule,n_chunks",
                         [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 4)])
def test_simulated_bubble_matches_formula(schedule, n_chunks):
    """Is the simulator's idle fraction (p−1)/(v·m+p−1), for several p, m and t_b/t_f?"""
    for p in (1, 2, 3, 4, 6):
        for m in (p, 2 * p, 4 * p):
            for tf, tb in ((1.0, 2.0), (1.0, 1.0), (0.3, 1.7)):
                events = simulate_schedule(p, m, schedule, n_chunks, tf, tb)
                assert stream_idle_fraction(events) == pytest.approx(
                    pipeline_bubble_fraction(p, m, schedule, n_chunks), abs=1e-12)


def test_bubble_formula_hand_values_and_memory():
    assert pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble_fraction(4, 8, "interleaved", 2) == pytest.approx(3 / 19)
    assert peak_stashed_microbatches(4, 8, "gpipe") == [8, 8, 8, 8]
    assert peak_stashed_microbatches(4, 8, "1f1b") == [4, 3, 2, 1]
    with pytest.raises(ValueError, match="multiple of n_stages"):
        pipeline_bubble_fraction(4, 6, "interleaved", 2)
    with pytest.raises(ValueError, match="n_chunks must be 1"):
        schedule_ops(4, 8, "gpipe", 2)


@pytest.mark.parametrize("schedule,n_chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_pipeline_equals_single_device(block_problem, block_config, schedule, n_chunks):
    """Does a pipelined step (4 stages, 4 micro-batches) accumulate the full-batch gradient?"""
    blocks, x, t = block_problem(7, n_layers=8)
    loss, grads = loss_and_grads(x, t, blocks, block_config.head_dim)
    got_loss, got, _ = pipeline_loss_and_grads(x, t, blocks, block_config.head_dim, 4, 4, schedule, n_chunks)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert max_relative_error_of_params(got, grads) < 1e-10


def test_layers_must_divide_over_stages(block_problem, block_config):
    blocks, x, t = block_problem(9)
    with pytest.raises(ValueError, match="must divide the number of layers"):
        pipeline_loss_and_grads(x, t, blocks, block_config.head_dim, 4, 4)


def test_simulate_ops_runs_any_order_and_reports_deadlock():
    from mlsys_lab.parallelism.pp import Op, schedule_ops, simulate_ops, simulate_schedule, stashed_peak

    orders = schedule_ops(3, 5, "1f1b")
    assert simulate_ops(orders) == simulate_schedule(3, 5, "1f1b")
    assert max(e.end for e in simulate_ops(orders)) == (5 + 3 - 1) * 3.0      # (m + p − 1)(t_f + t_b)
    assert [stashed_peak(ops) for ops in orders] == [3, 2, 1]                 # p − d
    gpipe = [[Op("F", i) for i in range(5)] + [Op("B", i) for i in range(5)]] * 3
    assert stashed_peak(gpipe[0]) == 5
    backward_first = [[Op("B", 0), Op("F", 0)], [Op("F", 0), Op("B", 0)]]
    with pytest.raises(RuntimeError, match="deadlocked"):
        simulate_ops(backward_first)
