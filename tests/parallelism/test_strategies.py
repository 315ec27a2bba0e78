"""Does every parallel strategy give the single-device numbers, on fresh random inputs?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.dp import data_parallel_grads
from mlsys_lab.parallelism.ep import MoEConfig, ep_moe_forward, init_moe, moe_forward
from mlsys_lab.parallelism.model import BlockConfig, init_model, loss_and_grads
from mlsys_lab.parallelism.pp import pipeline_loss_and_grads
from mlsys_lab.parallelism.sp import sp_loss_and_grads
from mlsys_lab.parallelism.tp import tp_loss_and_grads
from mlsys_lab.parallelism.zero import init_adam_state, reference_adam_step, zero_adam_step

CFG = BlockConfig(d_model=16, n_heads=4, d_ff=32)


def _problem(seed, n_layers=2, batch=4, seq=8):
    g = np.random.default_rng(seed)
    x = xp.asarray(g.normal(size=(batch, seq, CFG.d_model)))
    t = xp.asarray(g.normal(size=(batch, seq, CFG.d_model)))
    return init_model(CFG, n_layers, seed), x, t


def _max_rel_err(got, ref):
    return max(float(xp.max(xp.abs(a[k] - b[k])) / xp.max(xp.abs(b[k])))
               for a, b in zip(got, ref, strict=True) for k in a)


def test_hand_written_backward_matches_finite_differences():
    """Is the reference backward right? Central differences on every parameter kind."""
    blocks, x, t = _problem(11, n_layers=1, batch=2, seq=5)
    _, grads = loss_and_grads(x, t, blocks, CFG.head_dim)
    g = np.random.default_rng(3)
    for name, value in blocks[0].items():
        idx = tuple(int(g.integers(n)) for n in value.shape)
        eps = 1e-6
        value[idx] += eps
        up, _ = loss_and_grads(x, t, blocks, CFG.head_dim)
        value[idx] -= 2 * eps
        down, _ = loss_and_grads(x, t, blocks, CFG.head_dim)
        value[idx] += eps
        assert (up - down) / (2 * eps) == pytest.approx(float(grads[0][name][idx]), rel=1e-5, abs=1e-9), name


@pytest.mark.parametrize("n_ranks", [1, 2, 4])
@pytest.mark.parametrize("strategy", ["dp", "tp", "sp"])
def test_strategy_equals_single_device(strategy, n_ranks):
    """Do DP, TP and TP+SP give the single-device loss and gradients?"""
    blocks, x, t = _problem(100 + n_ranks)
    loss, grads = loss_and_grads(x, t, blocks, CFG.head_dim)
    if strategy == "dp":
        got_loss, got = data_parallel_grads(x, t, blocks, CFG.head_dim, n_ranks)
    elif strategy == "tp":
        got_loss, got = tp_loss_and_grads(x, t, blocks, CFG.n_heads, n_ranks)
    else:
        got_loss, got = sp_loss_and_grads(x, t, blocks, CFG.n_heads, n_ranks)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert _max_rel_err(got, grads) < 1e-10


def test_tp_counts_two_all_reduces_per_layer_each_way():
    """Megatron: 2 all-reduces forward + 2 backward per block, each of a (b, s, d) activation."""
    blocks, x, t = _problem(5, n_layers=3)
    log = comm.CommLog()
    tp_loss_and_grads(x, t, blocks, CFG.n_heads, 4, log)
    assert log.calls["all_reduce"] == 4 * 3
    assert log.bytes_sent["all_reduce"] == pytest.approx(12 * 2 * 3 / 4 * x.nbytes)


def test_sp_moves_tp_bytes_plus_gain_reduction():
    """All-reduce = reduce-scatter + all-gather: SP's activations move exactly TP's bytes."""
    blocks, x, t = _problem(6)
    tp_log, sp_log = comm.CommLog(), comm.CommLog()
    tp_loss_and_grads(x, t, blocks, CFG.n_heads, 4, tp_log)
    sp_loss_and_grads(x, t, blocks, CFG.n_heads, 4, sp_log)
    activation_bytes = sp_log.bytes_sent["all_gather"] + sp_log.bytes_sent["reduce_scatter"]
    assert activation_bytes == pytest.approx(tp_log.bytes_sent["all_reduce"])
    assert sp_log.calls["all_reduce"] == 2 * 2  # the two norm gains per block


@pytest.mark.parametrize("n_ranks", [1, 2, 4, 8])
def test_expert_parallel_equals_single_device(n_ranks):
    """Does all-to-all dispatch + combine give the single-device MoE output?"""
    cfg = MoEConfig(d_model=16, d_ff=24, n_experts=8, top_k=2)
    params = init_moe(cfg, seed=n_ranks)
    x = xp.asarray(np.random.default_rng(n_ranks).normal(size=(32, 16)))
    log = comm.CommLog()
    y, counts = ep_moe_forward(x, params, n_ranks, log)
    assert float(xp.max(xp.abs(y - moe_forward(x, params)))) < 1e-12
    assert counts.sum() == 32 * 2
    assert log.calls["all_to_all"] == 2  # dispatch and combine


@pytest.mark.parametrize("schedule,n_chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_pipeline_equals_single_device(schedule, n_chunks):
    """Does a pipelined step (4 stages, 4 micro-batches) accumulate the full-batch gradient?"""
    blocks, x, t = _problem(7, n_layers=8)
    loss, grads = loss_and_grads(x, t, blocks, CFG.head_dim)
    got_loss, got, _ = pipeline_loss_and_grads(x, t, blocks, CFG.head_dim, 4, 4, schedule, n_chunks)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert _max_rel_err(got, grads) < 1e-10


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_adam_equals_single_device_adam(stage):
    """Two ZeRO Adam steps on 4 ranks give the single-device parameters, and the paper's bytes."""
    blocks, x, t = _problem(8, n_layers=3, batch=8)
    _, ref, ref_state = reference_adam_step(x, t, blocks, CFG.head_dim, init_adam_state(blocks), 1e-2)
    _, ref, _ = reference_adam_step(x, t, ref, CFG.head_dim, ref_state, 1e-2)
    _, new, state, _ = zero_adam_step(x, t, blocks, CFG.head_dim, 4, stage, 1e-2)
    log = comm.CommLog()
    _, new, _, held = zero_adam_step(x, t, new, CFG.head_dim, 4, stage, 1e-2, state, log)
    assert _max_rel_err(new, ref) < 1e-10
    psi = sum(v.size for b in blocks for v in b.values())  # 3 blocks × 2080: divisible by 4, no padding
    factor = 3 if stage == 3 else 2
    assert log.total_bytes == pytest.approx(factor * 3 / 4 * psi * 8)
    assert held["optimizer"] == (2 * psi if stage == 0 else 2 * psi // 4)
    assert held["grads"] <= (psi if stage < 2 else psi // 4 + 2080)


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
    with pytest.raises(ValueError, match="n_parts must divide"):
        comm.partition(bufs[0], 5)


def test_bad_degrees_are_named():
    blocks, x, t = _problem(9)
    with pytest.raises(ValueError, match="n_ranks must divide n_heads=4"):
        tp_loss_and_grads(x, t, blocks, CFG.n_heads, 3)
    with pytest.raises(ValueError, match="n_ranks must divide the batch size"):
        data_parallel_grads(x, t, blocks, CFG.head_dim, 3)
    with pytest.raises(ValueError, match="must divide the number of layers"):
        pipeline_loss_and_grads(x, t, blocks, CFG.head_dim, 4, 4)
