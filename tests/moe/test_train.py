"""Is the hand-written MoE backward right, and does the balancing loss spread the load?"""

import numpy as np
import pytest

from mlsys_lab.backend import xp
from mlsys_lab.moe.gating import load_balancing_loss
from mlsys_lab.moe.train import (
    MoEClassifierConfig,
    init_moe_classifier,
    make_cluster_task,
    moe_classifier_backward,
    moe_classifier_forward,
    train_moe,
)
from mlsys_lab.nn import cross_entropy


@pytest.mark.parametrize("top_k", [1, 2])
def test_moe_gradients_match_finite_differences(top_k):
    cfg = MoEClassifierConfig(d_in=5, n_experts=4, d_hidden=6, n_classes=3, top_k=top_k)
    rng = np.random.default_rng(0)
    params = {k: v.astype(xp.float64) for k, v in init_moe_classifier(cfg).items()}
    params["w_gate"] = xp.asarray(rng.normal(0, 0.5, size=(5, 4)))
    x, y, _ = make_cluster_task(12, cfg)
    x = x.astype(xp.float64)

    def loss(p):
        out, cache = moe_classifier_forward(p, x, top_k)
        return cross_entropy(out, y)[0] + 0.3 * load_balancing_loss(cache["probs"], cache["idx"])

    out, cache = moe_classifier_forward(params, x, top_k)
    grads = moe_classifier_backward(params, cache, cross_entropy(out, y)[1], 0.3)
    for name in params:
        for _ in range(4):
            index = tuple(int(rng.integers(0, s)) for s in params[name].shape)
            old = float(params[name][index])
            params[name][index] = old + 1e-6
            plus = loss(params)
            params[name][index] = old - 1e-6
            minus = loss(params)
            params[name][index] = old
            assert float(grads[name][index]) == pytest.approx((plus - minus) / 2e-6, rel=1e-4, abs=1e-8), name


def test_auxiliary_loss_balances_the_experts():
    plain = train_moe(aux_weight=0.0, steps=200)
    balanced = train_moe(aux_weight=0.1, steps=200)
    assert balanced.aux_loss[-20:].mean() < plain.aux_loss[-20:].mean()
    assert balanced.load[-20:].mean(axis=0).min() > plain.load[-20:].mean(axis=0).min()
    assert plain.load.shape == (200, 8)
    np.testing.assert_allclose(plain.load.sum(axis=1), 1.0)


def test_aux_weight_must_be_nonnegative():
    with pytest.raises(ValueError, match="aux_weight"):
        train_moe(aux_weight=-1.0, steps=1)
