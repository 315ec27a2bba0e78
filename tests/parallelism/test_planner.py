"""Does the 3D planner count Megatron's parameters, price cross-node rings with NCCL's channels, prefer TP
inside a node, and name the published models?"""

import pytest

from mlsys_lab import records
from mlsys_lab.parallelism.planner import (
    ClusterSpec,
    ModelSpec,
    Plan,
    estimate,
    megatron_models,
    megatron_runs,
    predict_megatron_runs,
    rank_plans,
)


def _selene(n_gpus):
    return ClusterSpec(n_gpus, 8, 80e9, 312e12, 300e9, 25e9)


@pytest.mark.parametrize("row", records.load("parallelism_megatron_2021")["rows"])
def test_planner_parameter_count_matches_megatron_table(row):
    model = ModelSpec(row[3], row[2], row[1])
    assert model.n_params / 1e9 == pytest.approx(row[0], rel=0.03)


def test_parameter_count_hand_value():
    """Ψ = 12·l·h² + 13·l·h + (V + s)·h: 2 layers, h = 4, V = 10, s = 6 -> 384 + 104 + 64 = 552."""
    assert ModelSpec(2, 4, 1, seq_len=6, vocab=10).n_params == pytest.approx(552)


def test_planner_prefers_tp_inside_a_node():
    """TP 16 on 8-GPU nodes: 8 channels on 8 × 25 GB/s NICs (200 GB/s) instead of NVLink's 300 GB/s."""
    model = ModelSpec(80, 12288, 96)
    inside = estimate(model, _selene(512), Plan(4, 8, 16, 1), 512)
    across = estimate(model, _selene(512), Plan(2, 16, 16, 1), 512)
    act = 2 * 2048 * 12288  # bytes of one micro-batch's activation, b = 1
    one_inside = 14 * 5e-6 + 2 * 7 / 8 * act / 300e9
    one_across = 30 * 5e-6 + 2 * 15 / 16 * act / 200e9
    # same layers per stage (pp 16), twice the micro-batches (dp 2 instead of 4): 2× the all-reduces
    assert across.seconds["tp_comm"] / inside.seconds["tp_comm"] == pytest.approx(2 * one_across / one_inside)
    assert (2 * 15 / 16 / 200e9) / (2 * 7 / 8 / 300e9) == pytest.approx(1.607, abs=1e-3)  # bandwidth penalty
    best = rank_plans(model, _selene(512), 512, micro_batches=(1,), zero_stages=(1,))
    assert best and best[0].plan.tp <= 8
    with pytest.raises(ValueError, match="dp·tp·pp must equal n_gpus=512"):
        estimate(model, _selene(512), Plan(1, 8, 8), 512)


def test_single_channel_strawman_runs_cross_node_tp_at_one_nic():
    """n_channels = 1: the TP-16 ring crosses nodes at one NIC's 25 GB/s, the old ~10× per all-reduce."""
    model = ModelSpec(80, 12288, 96)
    cluster = ClusterSpec(512, 8, 80e9, 312e12, 300e9, 25e9, n_channels=1)
    inside = estimate(model, cluster, Plan(4, 8, 16, 1), 512)
    across = estimate(model, cluster, Plan(2, 16, 16, 1), 512)
    act = 2 * 2048 * 12288
    one_inside = 14 * 5e-6 + 2 * 7 / 8 * act / 300e9
    one_across = 30 * 5e-6 + 2 * 15 / 16 * act / 25e9
    assert across.seconds["tp_comm"] / inside.seconds["tp_comm"] == pytest.approx(2 * one_across / one_inside)
    with pytest.raises(ValueError, match="n_channels"):
        ClusterSpec(8, 8, 80e9, 312e12, 300e9, 25e9, n_channels=0)


def test_data_parallel_group_uses_one_nic_per_rank_on_the_node():
    """DP over 4 nodes: TP 8 leaves 1 rank per node (one NIC); TP 2 leaves 4 per node (4 channels)."""
    model = ModelSpec(4, 1024, 16, vocab=1024, seq_len=1024)
    cluster = _selene(32)
    grads_tp8 = 2 * model.n_params / 8
    grads_tp2 = 2 * model.n_params / 2
    tp8 = estimate(model, cluster, Plan(4, 8, 1), 32)
    tp2 = estimate(model, cluster, Plan(16, 2, 1), 32)
    assert tp8.seconds["dp_comm"] == pytest.approx(6 * 5e-6 + 2 * 3 / 4 * grads_tp8 / 25e9)
    assert tp2.seconds["dp_comm"] == pytest.approx(30 * 5e-6 + 2 * 15 / 16 * grads_tp2 / 100e9)


def test_megatron_models_are_the_published_shapes():
    models = megatron_models()
    assert len(models) == len(megatron_runs()) == 10
    gpt145 = models["GPT 145.6B"]
    assert (gpt145.n_layers, gpt145.hidden, gpt145.n_heads, gpt145.name) == (80, 12288, 96, "GPT 145.6B")


def test_calibrated_run_is_reproduced_exactly():
    runs = predict_megatron_runs()
    assert runs[0]["calibration"] and runs[0]["relative_error"] == pytest.approx(0.0, abs=1e-9)
    assert all(0 < r["efficiency"] < 1 for r in runs)


def test_activation_memory_is_korthikantis_tp_row_with_full_recompute():
    """Which row of Korthikanti et al.'s Table 2 the planner uses (the lesson says so): tensor parallelism without
    sequence parallelism, s·b·h·(10 + 24/t + 5·a·s/(h·t)) per layer, and with full recomputation the layer inputs,
    2·s·b·h, plus one layer's full activations. Not the sequence-parallel 34/t row, nor selective recomputation."""
    model, t, p, b = ModelSpec(8, 1024, 16, seq_len=512), 4, 2, 1
    s, h, a, layers = 512, 1024, 16, 8
    full = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    m = 16 // (2 * b)  # global batch 16 over dp 2
    stored = estimate(model, _selene(16), Plan(2, t, p, micro_batch=b, recompute=False), 16)
    assert stored.memory_bytes["activations"] == pytest.approx(layers / p * min(p, m) * full)
    recomputed = estimate(model, _selene(16), Plan(2, t, p, micro_batch=b), 16)
    assert recomputed.memory_bytes["activations"] == pytest.approx(layers / p * min(p, m) * 2 * s * b * h + full)
    sequence_parallel = s * b * h * (34 / t + 5 * a * s / (h * t))
    assert stored.memory_bytes["activations"] != pytest.approx(layers / p * min(p, m) * sequence_parallel)
