"""Bias balancing and the router z-loss against hand-worked values."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.moe.balancing import biased_top_k, router_z_loss, update_bias
from mlsys_lab.moe.gating import load_balancing_loss


def test_bias_changes_the_choice_not_the_gate():
    scores = np.array([[0.6, 0.3, 0.1]])
    idx, gates = biased_top_k(scores, np.array([0.0, 0.5, 0.0]), 2)
    assert idx.tolist() == [[1, 0]]                       # 0.8 beats 0.6 with the bias
    assert np.allclose(gates, [[0.3 / 0.9, 0.6 / 0.9]])   # gates from the unbiased scores


def test_update_bias_moves_against_the_load():
    assert update_bias(np.zeros(3), np.array([5, 1, 3]), 0.1).tolist() == [-0.1, 0.1, 0.0]


def test_bias_balancing_evens_a_skewed_router():
    rng = np.random.default_rng(0)
    skew = np.linspace(0.3, -0.3, 8)
    bias = np.zeros(8)
    for _ in range(200):
        scores = 1 / (1 + np.exp(-(rng.normal(size=(512, 8)) * 0.2 + skew)))
        idx, _ = biased_top_k(scores, bias, 2)
        load = np.bincount(idx.ravel(), minlength=8)
        bias = update_bias(bias, load, 0.002)
    assert load.max() / load.mean() < 1.2


def test_z_loss_by_hand_and_its_gradient():
    loss, grad = router_z_loss(np.array([[0.0, 0.0]]))
    assert loss == pytest.approx(np.log(2) ** 2)
    assert np.allclose(grad, [[np.log(2), np.log(2)]])    # 2·lse·(½, ½)
    x = np.random.default_rng(1).normal(size=(3, 4))
    eps, (i, j) = 1e-6, (1, 2)
    bumped = x.copy()
    bumped[i, j] += eps
    numeric = (router_z_loss(bumped)[0] - router_z_loss(x)[0]) / eps
    assert numeric == pytest.approx(router_z_loss(x)[1][i, j], rel=1e-4)


def test_z_loss_is_stable_for_huge_logits_and_rejects_bad_shapes():
    assert np.isfinite(router_z_loss(np.array([[1000.0, 0.0]]))[0])
    with pytest.raises(ValueError, match="logits"):
        router_z_loss(np.zeros(3))
    with pytest.raises(ValueError, match="bias"):
        biased_top_k(np.ones((2, 3)), np.zeros(2), 1)


def test_the_balance_loss_can_fall_below_one_for_unbalanced_routing():
    probs = np.array([[0.51, 0.49]] * 6 + [[0.0, 1.0]] * 4)
    assert load_balancing_loss(probs, probs.argmax(axis=1)) == pytest.approx(0.9224)
