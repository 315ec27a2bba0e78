"""Do routing, capacity and balancing follow Shazeer, GShard and Switch; do counts match DeepSeek-V3?"""

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
    top_k_gating,
)
from mlsys_lab.moe.systems import (
    DEEPSEEK_V3,
    GSHARD_600B,
    expert_combinations,
    expert_ffn_intensity,
    fine_grained,
    mla_params,
    tokens_per_expert,
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


def test_deepseek_v3_counts_match_the_report():
    # 671B total, 37B activated (DeepSeek-V3 technical report, abstract)
    assert DEEPSEEK_V3.total_params() == pytest.approx(671e9, rel=0.005)
    assert DEEPSEEK_V3.activated_params() == pytest.approx(37e9, rel=0.03)
    assert DEEPSEEK_V3.expert_params() == 3 * 7168 * 2048
    assert mla_params() == pytest.approx(187.1e6, rel=1e-3)


def test_gshard_activates_far_less_than_a_tenth():
    assert GSHARD_600B.total_params() == pytest.approx(600e9, rel=0.05)
    assert GSHARD_600B.activated_params() / GSHARD_600B.total_params() < 0.01


def test_shrinking_batch_and_intensity():
    assert tokens_per_expert(256, 64, 2) == 8.0
    # weights dominate the bytes: intensity ≈ tokens (bf16)
    assert expert_ffn_intensity(8, 4096, 14336) == pytest.approx(8, rel=0.01)
    assert expert_ffn_intensity(1e6, 4096, 4096) > 1000


def test_fine_grained_segmentation_keeps_compute_and_multiplies_combinations():
    assert fine_grained(16, 2, 4096, 4) == (64, 8, 1024)
    assert expert_combinations(16, 2) == 120 and expert_combinations(64, 8) == 4_426_165_368
    with pytest.raises(ValueError, match="m"):
        fine_grained(16, 2, 4096, 3)


def test_dispatch_bytes_by_hand():
    from mlsys_lab.moe.systems import dispatch_bytes_per_gpu

    assert dispatch_bytes_per_gpu(4096, 8, 7168, 1) == 4096 * 8 * 7168
    with pytest.raises(ValueError, match="top_k"):
        dispatch_bytes_per_gpu(1, 0, 8)


def test_expected_active_experts_limits_and_a_hand_value():
    from mlsys_lab.moe.gating import expected_active_experts

    assert expected_active_experts(1, 8, 2) == pytest.approx(2)
    assert expected_active_experts(2, 8, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert expected_active_experts(10_000, 64, 6) == pytest.approx(64)
    # Monte Carlo: distinct experts hit by T tokens with k distinct random experts each
    rng = np.random.default_rng(0)
    counts = [len(np.unique(np.argsort(rng.random((5, 16)), axis=1)[:, :3])) for _ in range(4000)]
    assert np.mean(counts) == pytest.approx(expected_active_experts(5, 16, 3), rel=0.02)


def test_expert_parallel_reads_fewer_expert_bytes_per_token_and_holds_1_over_n():
    from mlsys_lab.moe.gating import expert_bytes_per_token, expert_memory_per_device

    replicated = expert_bytes_per_token(4, 8, 64, 6, 1.0, expert_parallel=False)
    parallel = expert_bytes_per_token(4, 8, 64, 6, 1.0, expert_parallel=True)
    assert parallel < replicated
    # one device: expert parallelism is replication
    one_device = expert_bytes_per_token(4, 1, 64, 6, 1.0, True)
    assert one_device == pytest.approx(expert_bytes_per_token(4, 1, 64, 6, 1.0, False))
    assert expert_memory_per_device(10.0, 1.0, 64, 8) == 18.0
    assert expert_memory_per_device(10.0, 1.0, 128, 16) == 18.0  # experts and devices grow together: flat
    with pytest.raises(ValueError, match="n_experts must be divisible by n_devices=3"):
        expert_memory_per_device(10.0, 1.0, 64, 3)
