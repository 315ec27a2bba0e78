"""Switch's auxiliary load-balancing loss in the capstone's mixture of experts: its gradient is the loss's, α = 0
changes nothing, the learner's lesson-11 aux_loss runs the model, a wrong one is caught, and it evens the load."""

import numpy as np
import pytest

from mlsys_lab.capstone.model import GPTConfig, ModelOps, count_params, course_ops, init_theta, loss_and_grad
from mlsys_lab.capstone.moe import MoeConfig
from mlsys_lab.capstone.moe_train import moe_gradient_check, train_moe_model
from mlsys_lab.capstone.stack import Stack
from mlsys_lab.capstone.train import RunConfig
from mlsys_lab.moe.gating import aux_loss_and_grad

TINY = GPTConfig(vocab_size=7, context=6, d_model=8, n_heads=2, n_layers=2, dtype="float64",
                 moe=MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0, aux_alpha=0.5))


def _with_aux(aux) -> ModelOps:
    ops = course_ops()
    return ModelOps(ops.cross_entropy, ops.layer_norm_backward, ops.attention_backward, aux_loss=aux)


def _batch(config: GPTConfig, seed: int = 1):
    g = np.random.default_rng(seed)
    theta = init_theta(config, seed) + g.normal(0, 0.05, count_params(config))
    idx = g.integers(0, config.vocab_size, (3, config.context))
    return theta, idx, idx[:, ::-1]


@pytest.mark.parametrize("alpha", [0.01, 0.5])
def test_gradient_matches_central_differences_with_the_aux_loss(alpha):
    config = GPTConfig(**{**TINY.__dict__, "moe": MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0,
                                                            aux_alpha=alpha)})
    report = moe_gradient_check(config, batch=3, n_coords=300)
    assert report["n_checked"] >= 290 and report["max_abs_error"] < 1e-8


def test_the_loss_is_cross_entropy_plus_alpha_times_every_blocks_aux_loss():
    theta, idx, targets = _batch(TINY)
    plain = GPTConfig(**{**TINY.__dict__, "moe": MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0)})
    with_aux, _ = loss_and_grad(theta, idx, targets, TINY)
    without, _ = loss_and_grad(theta, idx, targets, plain)
    # each block's aux loss is at most N = 4 and about 1 near balance: two blocks add about 2α = 1
    assert 0.5 * 2 * 0.5 < with_aux - without < 0.5 * 2 * 4


def test_alpha_zero_never_runs_the_aux_loss_and_changes_nothing():
    def refuse(logits, k):
        raise AssertionError("aux_loss ran with aux_alpha = 0")

    plain = GPTConfig(**{**TINY.__dict__, "moe": MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0)})
    theta, idx, targets = _batch(plain)
    ours, theirs = loss_and_grad(theta, idx, targets, plain), loss_and_grad(theta, idx, targets, plain,
                                                                           _with_aux(refuse))
    assert ours[0] == theirs[0] and np.array_equal(ours[1], theirs[1])
    config = RunConfig(model=GPTConfig(d_model=16, n_heads=2, n_layers=1, context=16, moe=MoeConfig()), batch_size=4)
    explicit = RunConfig(model=GPTConfig(d_model=16, n_heads=2, n_layers=1, context=16,
                                         moe=MoeConfig(aux_alpha=0.0)), batch_size=4)
    assert np.array_equal(train_moe_model(config, 3)[0].theta, train_moe_model(explicit, 3)[0].theta)


def test_the_learners_aux_loss_runs_the_model(learner):
    theirs = learner.solved("11_moe.ipynb", "aux_loss")
    theta, idx, targets = _batch(TINY)
    ours, got = loss_and_grad(theta, idx, targets, TINY), loss_and_grad(theta, idx, targets, TINY, _with_aux(theirs))
    assert got[0] == pytest.approx(ours[0], abs=1e-12) and np.allclose(got[1], ours[1], atol=1e-12)
    assert moe_gradient_check(TINY, batch=3, n_coords=60, ops=_with_aux(theirs))["max_abs_error"] < 1e-8


def test_a_sign_flipped_aux_gradient_fails_the_gradient_check():
    def flipped(logits, k):
        loss, grad = aux_loss_and_grad(logits, k)
        return loss, -grad

    assert moe_gradient_check(TINY, batch=3, n_coords=60, ops=_with_aux(flipped))["max_abs_error"] > 1e-4


def test_the_course_stack_runs_the_library_aux_loss():
    assert Stack.course().ops.aux_loss is aux_loss_and_grad and Stack.course().exact_ops.aux_loss is aux_loss_and_grad


def test_switchs_alpha_evens_the_expert_load():
    """100 steps of the MoE test model, the same seeds and batches: α = 0.01 lowers the aux loss, the largest
    expert's load over the mean, and the share of pairs dropped by capacity (measured: 1.26 → 1.15, 1.61 → 1.40,
    22.0% → 10.2%; seeds 1 and 2 go the same way by less)."""
    logs = {}
    for alpha in (0.0, 0.01):
        config = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=1, context=32,
                                           moe=MoeConfig(aux_alpha=alpha)), batch_size=8, lr=1e-2)
        logs[alpha] = train_moe_model(config, 100)[1]
    plain, balanced = logs[0.0], logs[0.01]
    assert len(balanced.aux) == len(balanced.max_load) == 100
    assert np.mean(balanced.aux) < np.mean(plain.aux) - 0.05
    assert np.mean(balanced.max_load) < np.mean(plain.max_load) - 0.1
    assert np.mean(balanced.dropped) < 0.7 * np.mean(plain.dropped)


@pytest.mark.parametrize("alpha", [-0.01, float("inf"), float("nan")])
def test_a_bad_alpha_is_refused_by_name(alpha):
    with pytest.raises(ValueError, match="aux_alpha"):
        MoeConfig(aux_alpha=alpha)
