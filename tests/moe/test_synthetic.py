"""Do the synthetic routed batches have the skew, the capacity picture and the inputs they promise?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy
from mlsys_lab.moe.synthetic import random_routing, route_batch, skewed_router_logits


def test_skew_adds_a_linear_preference_to_normal_logits():
    plain = skewed_router_logits(np.random.default_rng(3), 5, 4, skew=0.0)
    skewed = skewed_router_logits(np.random.default_rng(3), 5, 4, skew=1.5)
    np.testing.assert_allclose(skewed - plain, np.tile(1.5 * np.array([1, 1 / 3, -1 / 3, -1]), (5, 1)))
    half = skewed_router_logits(np.random.default_rng(3), 5, 3, skew=2.0, last_preference=0.0)
    np.testing.assert_allclose(half - skewed_router_logits(np.random.default_rng(3), 5, 3, 0.0), [[2, 1, 0]] * 5)


def test_route_batch_picture_counts_every_pick_once():
    result = route_batch(32, 8, 2, 1.0, 1.0)
    assert (result["picture"] > 0).sum() == 64
    assert result["load"].sum() == 64
    assert result["capacity"] == 8  # ⌈2 · 32 / 8 · 1.0⌉
    over = np.maximum(result["load"] - result["capacity"], 0).sum()  # each expert keeps at most 8
    assert (result["picture"] == 2).sum() == over
    assert result["drop_fraction"] == pytest.approx(over / 64)
    np.testing.assert_allclose(result["gates"].sum(axis=1), 1.0, rtol=1e-6)


def test_route_batch_with_ample_capacity_drops_nothing_and_skew_unbalances():
    assert route_batch(64, 8, 2, 8.0, 3.0)["drop_fraction"] == 0.0
    balanced, skewed = route_batch(256, 8, 1, 1.0, 0.0), route_batch(256, 8, 1, 1.0, 3.0)
    assert skewed["aux_loss"] > balanced["aux_loss"] >= 0.99  # N·Σ f·P is 1 when balanced
    assert skewed["load"][0] > skewed["load"][-1]
    with pytest.raises(ValueError, match="top_k"):
        route_batch(16, 2, 4, 1.0, 0.0)


def test_random_routing_inputs_have_the_promised_shapes_and_gates():
    x, idx, gate, w1, w2 = (asnumpy(a) for a in random_routing(10, 8, 3, 4, 6, dtype=np.float64, seed=2))
    assert x.shape == (10, 4) and idx.shape == (10, 3) and w1.shape == (8, 4, 6) and w2.shape == (8, 6, 4)
    assert all(len(set(row)) == 3 for row in idx.tolist())  # distinct experts per token
    np.testing.assert_allclose(gate.sum(axis=1), 1.0)
    assert (np.diff(gate, axis=1) <= 0).all()  # best first
    popular = asnumpy(random_routing(2000, 8, 1, 4, 4, seed=0, skew=3.0)[1]).ravel()
    assert np.bincount(popular, minlength=8)[0] > 5 * np.bincount(popular, minlength=8)[-1]
