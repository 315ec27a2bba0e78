"""Do routing, capacity and balancing follow Shazeer, GShard and Switch?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.moe.gating import (
    assign_with_capacity,
    coefficient_of_variation,
    drop_fraction,
    expert_capacity,
    gates_dense,
    gshard_second_expert_mask,
    load_balancing_grad,
    load_balancing_loss,
    noisy_logits,
    switch_gating,
    top_k_experts,
    top_k_gating,
)
from mlsys_lab.nn import softmax


def test_top_k_by_hand():
    logits = xp.asarray([[1.0, 3.0, 2.0, 0.0]])
    idx, w = top_k_gating(logits, 2)
    assert asnumpy(idx).tolist() == [[1, 2]]
    np.testing.assert_allclose(asnumpy(w), [[np.e / (np.e + 1), 1 / (np.e + 1)]], rtol=1e-6)
    dense = asnumpy(gates_dense(idx, w, 4))
    assert dense[0, 0] == 0 and dense[0, 3] == 0 and dense.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="k"):
        top_k_gating(logits, 5)


def test_top_k_stays_on_the_host_for_numpy_input():
    """NumPy in, NumPy out (an MPI rank's arrays stay on the host even in a GPU session)."""
    logits = np.array([[0.0, 2.0, 1.0], [5.0, -1.0, 4.0]])
    idx, w = top_k_gating(logits, 2)
    assert isinstance(idx, np.ndarray) and isinstance(w, np.ndarray)
    assert idx.tolist() == [[1, 2], [0, 2]]
    np.testing.assert_allclose(w[:, 0], 1 / (1 + np.exp(-1.0)))  # e^a / (e^a + e^{a-1})
    assert top_k_experts(logits, 1).tolist() == [[1], [0]]


def test_switch_gate_keeps_the_router_probability():
    logits = xp.asarray([[0.0, np.log(3.0)], [np.log(2.0), 0.0]])
    probs, idx, gate = switch_gating(logits, 1)
    assert asnumpy(idx).tolist() == [[1], [0]]
    np.testing.assert_allclose(asnumpy(gate), [[0.75], [2 / 3]])  # not renormalised to 1
    np.testing.assert_allclose(asnumpy(probs).sum(axis=1), 1.0)


def test_noise_is_scaled_by_softplus():
    x = xp.ones((20000, 1), dtype=xp.float32)
    h = asnumpy(noisy_logits(x, xp.zeros((1, 2), xp.float32), xp.asarray([[0.0, 5.0]], xp.float32),
                             np.random.default_rng(0)))
    assert h[:, 0].std() == pytest.approx(np.log(2), rel=0.03)
    assert h[:, 1].std() == pytest.approx(np.log1p(np.exp(5.0)), rel=0.03)


@pytest.mark.parametrize(("n_tokens", "n_experts", "factor", "k", "expected"),
                         [(64, 8, 1.25, 1, 10), (64, 8, 1.0, 1, 8), (1024, 8, 1.0, 2, 256),
                          (10, 4, 1.0, 1, 3)])
def test_capacity_by_hand(n_tokens, n_experts, factor, k, expected):
    assert expert_capacity(n_tokens, n_experts, factor, k) == expected


def test_capacity_rejects_bad_factor():
    with pytest.raises(ValueError, match="capacity_factor"):
        expert_capacity(64, 8, 0.0)


def test_first_choices_are_placed_before_second_choices():
    idx = np.array([[0, 1], [0, 2], [0, 1], [1, 0]])
    kept, slot = assign_with_capacity(idx, 3, 2)
    assert kept.tolist() == [[True, True], [True, True], [False, False], [True, False]]
    assert slot.tolist() == [[0, 1], [1, 0], [-1, -1], [0, -1]]


def _place_one_by_one(indices, n_experts, capacity):
    """Independent reference: walk the choices level by level, tokens in order, filling each expert."""
    kept = np.zeros(indices.shape, dtype=bool)
    load = np.zeros(n_experts, dtype=int)
    for j in range(indices.shape[1]):
        for t in range(indices.shape[0]):
            if load[indices[t, j]] < capacity:
                kept[t, j] = True
                load[indices[t, j]] += 1
    return kept


def test_vectorised_placement_equals_the_loop_on_random_routings():
    g = np.random.default_rng(7)
    for _ in range(200):
        n_tokens, n_experts = int(g.integers(1, 40)), int(g.integers(2, 10))
        k = int(g.integers(1, min(3, n_experts) + 1))
        capacity = int(g.integers(0, n_tokens * k // n_experts + 3))
        idx = top_k_experts(g.normal(size=(n_tokens, n_experts)) + g.normal(size=n_experts), k)
        kept, slot = assign_with_capacity(idx, n_experts, capacity)
        np.testing.assert_array_equal(kept, _place_one_by_one(idx, n_experts, capacity))
        assert (slot[kept] < capacity).all() and (slot[~kept] == -1).all()


def test_pairs_not_sent_take_no_place():
    # GShard's random routing: token 1 sends no second choice, so token 2's second choice gets expert 1's slot
    idx = np.array([[0, 1], [0, 1], [2, 1]])
    routed = np.array([[True, True], [True, False], [True, True]])
    kept, slot = assign_with_capacity(idx, 3, 1, routed)
    assert kept.tolist() == [[True, True], [False, False], [True, False]]
    assert slot.tolist() == [[0, 0], [-1, -1], [0, -1]]
    # 5 pairs sent, 3 kept: 2/5 overflow; the capacity counts all 3 tokens at top-2 (⌈3·2/3·0.5⌉ = 1)
    assert drop_fraction(idx, 3, 0.5, routed) == pytest.approx(2 / 5)
    assert drop_fraction(idx, 3, 0.5) == pytest.approx(3 / 6)
    with pytest.raises(ValueError, match="routed"):
        assign_with_capacity(idx, 3, 1, routed[:2])


def test_drop_fraction_falls_to_zero_with_enough_capacity():
    idx = np.random.default_rng(0).integers(0, 8, size=(256, 1))
    drops = [drop_fraction(idx, 8, f) for f in (0.5, 1.0, 1.5, 8.0)]
    assert drops[0] >= 0.5 and drops == sorted(drops, reverse=True) and drops[-1] == 0.0


def test_gshard_keeps_the_second_expert_with_probability_two_g2():
    weights = np.tile([[0.8, 0.2]], (20000, 1))
    mask = gshard_second_expert_mask(weights, np.random.default_rng(0))
    assert mask[:, 0].all()
    assert mask[:, 1].mean() == pytest.approx(0.4, abs=0.02)
    assert gshard_second_expert_mask(np.tile([[0.5, 0.5]], (10, 1)), np.random.default_rng(0))[:, 1].all()


def test_balancing_loss_is_one_when_uniform_and_n_when_collapsed():
    n = 4
    assert load_balancing_loss(xp.full((8, n), 0.25), xp.arange(8) % n) == pytest.approx(1.0)
    collapsed = xp.zeros((8, n))
    collapsed[:, 2] = 1.0
    assert load_balancing_loss(collapsed, xp.full(8, 2)) == pytest.approx(n)


def test_balancing_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    probs = asnumpy(softmax(xp.asarray(rng.normal(size=(6, 3)))))
    idx = probs.argmax(axis=1)
    grad = asnumpy(load_balancing_grad(xp.asarray(probs), xp.asarray(idx)))
    bumped = probs.copy()
    bumped[2, 1] += 1e-6  # f is held fixed: the routing decisions do not change
    numeric = (load_balancing_loss(bumped, idx) - load_balancing_loss(probs, idx)) / 1e-6
    assert grad[2, 1] == pytest.approx(numeric, rel=1e-5)


def test_coefficient_of_variation():
    assert coefficient_of_variation([5, 5, 5]) == 0.0
    assert coefficient_of_variation([0, 0, 9]) == pytest.approx(np.sqrt(2))
