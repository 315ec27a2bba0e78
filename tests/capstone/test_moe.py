"""The capstone's mixture of experts: is its backward the forward's gradient (away from routing ties), do dropped
pairs skip the MLP, do the learner's lesson-11 pieces give the course's numbers, and does the loss fall?"""

import numpy as np
import pytest

from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    count_params,
    course_ops,
    gpt_forward,
    init_theta,
    loss_and_grad,
    param_layout,
    views,
)
from mlsys_lab.capstone.moe import MoeConfig, capacity_routing, expert_params, gate_combine, routing_stats
from mlsys_lab.capstone.moe_train import moe_gradient_check, train_moe_model
from mlsys_lab.capstone.train import RunConfig, held_out_loss
from mlsys_lab.exercises.moe import reference_route, reference_top_k_gate

TINY = GPTConfig(vocab_size=7, context=6, d_model=8, n_heads=2, n_layers=2, dtype="float64",
                 moe=MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0))


def test_gradient_matches_central_differences_with_tokens_dropped():
    report = moe_gradient_check(TINY, batch=3, n_coords=400)
    assert report["dropped"] > 0.02 and report["n_checked"] >= 390 and report["max_gradient"] > 1e-2
    assert report["max_abs_error"] < 1e-8


def test_the_course_pieces_are_lesson_11s_references():
    g = np.random.default_rng(0)
    for n_tokens, n, k, capacity in ((12, 4, 2, 5), (9, 3, 1, 2), (30, 4, 2, 0), (5, 4, 4, 9)):
        logits = g.normal(size=(n_tokens, n))
        ours, theirs = capacity_routing(logits, k, capacity), reference_route(logits, k, capacity)
        assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
        assert np.allclose(gate_combine(logits, k, capacity), reference_top_k_gate(logits, k, capacity), atol=1e-15)


def test_the_learners_pieces_give_the_courses_loss_and_gradient():
    g = np.random.default_rng(1)
    theta, idx = init_theta(TINY, 1) + g.normal(0, 0.05, count_params(TINY)), g.integers(0, 7, (3, 6))
    ours = loss_and_grad(theta, idx, idx[:, ::-1], TINY)
    ops = course_ops()
    theirs = loss_and_grad(theta, idx, idx[:, ::-1], TINY, ModelOps(ops.cross_entropy, ops.layer_norm_backward,
                                                                    ops.attention_backward, reference_route,
                                                                    reference_top_k_gate))
    assert ours[0] == pytest.approx(theirs[0], abs=1e-13) and np.allclose(ours[1], theirs[1], atol=1e-12)


def test_a_dropped_token_skips_the_mlp():
    """Every pair dropped: each block is attention only, the experts cannot matter nor get a gradient."""
    def drop_all(logits, k, capacity):
        indices, _ = capacity_routing(logits, k, capacity)
        return indices, np.zeros(indices.shape, dtype=bool)

    ops = course_ops()
    ops = ModelOps(ops.cross_entropy, ops.layer_norm_backward, ops.attention_backward, drop_all,
                   lambda logits, k, capacity: np.zeros((*logits.shape, capacity)))
    theta, idx = init_theta(TINY, 2), np.random.default_rng(2).integers(0, 7, (2, 6))
    stripped = theta.copy()
    for name, view in views(stripped, TINY).items():
        if ".moe." in name:
            view[...] = 0.0
    assert np.array_equal(gpt_forward(stripped, idx, TINY, ops=ops)[0], gpt_forward(theta, idx, TINY, ops=ops)[0])
    grads = views(loss_and_grad(theta, idx, idx, TINY, ops)[1], TINY)
    assert all(np.all(grads[name] == 0) for name in grads if ".moe." in name or "router" in name)


def test_expert_parameters_match_the_dense_mlp_when_active():
    counts = expert_params(64, MoeConfig())
    assert counts["active"] - counts["dense"] == 64 * 4 + 2 * (128 + 64) - (4 * 64 + 64)  # router and biases only
    assert counts["total"] == 4 * (2 * 64 * 128 + 128 + 64) + 64 * 4
    config = GPTConfig(moe=MoeConfig())
    assert count_params(config) - count_params(GPTConfig()) == 2 * (counts["total"] - counts["dense"])
    assert [name for name, _ in param_layout(config)][10:15] == ["h0.router.w", "h0.moe.fc.w", "h0.moe.fc.b",
                                                                  "h0.moe.out.w", "h0.moe.out.b"]


def test_routing_stats_count_drops_and_share_the_load():
    indices, kept = np.array([[0, 1], [0, 2], [0, 1]]), np.array([[True, True], [True, True], [False, True]])
    dropped, load = routing_stats(indices, kept, 4)
    assert dropped == pytest.approx(1 / 6) and np.allclose(load, [0.4, 0.4, 0.2, 0.0])


def test_loss_falls_and_every_step_records_its_routing():
    config = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=1, context=32, moe=MoeConfig()), batch_size=8,
                       lr=1e-2)
    before = held_out_loss(init_theta(config.model), config, n_batches=1)
    state, log = train_moe_model(config, 30)
    assert held_out_loss(state.theta, config, n_batches=1) < before - 0.5
    assert len(log.dropped) == len(log.load) == 30 and log.load[0].shape == (1, 4)
    assert np.allclose([load.sum() for load in log.load], 1.0) and all(0 <= d < 0.5 for d in log.dropped)


def test_bad_configs_are_refused_by_name():
    with pytest.raises(TypeError, match="moe"):
        GPTConfig(moe={"n_experts": 4})
    with pytest.raises(ValueError, match="top_k"):
        MoeConfig(n_experts=2, top_k=3)
    with pytest.raises(ValueError, match="config.moe must be a MoeConfig"):
        train_moe_model(RunConfig(), 1)
