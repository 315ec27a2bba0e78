"""Does the 3D planner count Megatron's parameters, prefer TP inside a node, and name the published models?"""

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
    """Crossing the node boundary with TP (16 > 8 GPUs per node) slows the TP all-reduces ~12x."""
    model = ModelSpec(80, 12288, 96)
    inside = estimate(model, _selene(512), Plan(4, 8, 16, 1), 512)
    across = estimate(model, _selene(512), Plan(2, 16, 16, 1), 512)
    assert across.seconds["tp_comm"] / inside.seconds["tp_comm"] > 10
    best = rank_plans(model, _selene(512), 512, micro_batches=(1,), zero_stages=(1,))
    assert best and best[0].plan.tp <= 8
    with pytest.raises(ValueError, match="dp·tp·pp must equal n_gpus=512"):
        estimate(model, _selene(512), Plan(1, 8, 8), 512)


def test_megatron_models_are_the_published_shapes():
    models = megatron_models()
    assert len(models) == len(megatron_runs()) == 10
    gpt145 = models["GPT 145.6B"]
    assert (gpt145.n_layers, gpt145.hidden, gpt145.n_heads, gpt145.name) == (80, 12288, 96, "GPT 145.6B")


def test_calibrated_run_is_reproduced_exactly():
    runs = predict_megatron_runs()
    assert runs[0]["calibration"] and runs[0]["relative_error"] == pytest.approx(0.0, abs=1e-9)
    assert all(0 < r["efficiency"] < 1 for r in runs)
