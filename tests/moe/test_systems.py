"""Do the parameter counts match DeepSeek-V3 and GShard, and do the shrinking batch and serving figures
follow from their formulas?"""

import numpy as np
import pytest

from mlsys_lab.moe.systems import (
    DEEPSEEK_V3,
    GSHARD_600B,
    dispatch_bytes_per_gpu,
    expected_active_experts,
    expert_bytes_per_token,
    expert_combinations,
    expert_ffn_intensity,
    expert_memory_per_device,
    fine_grained,
    mla_params,
    tokens_per_expert,
)


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
    assert dispatch_bytes_per_gpu(4096, 8, 7168, 1) == 4096 * 8 * 7168
    with pytest.raises(ValueError, match="top_k"):
        dispatch_bytes_per_gpu(1, 0, 8)


def test_expected_active_experts_limits_and_a_hand_value():
    assert expected_active_experts(1, 8, 2) == pytest.approx(2)
    assert expected_active_experts(2, 8, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert expected_active_experts(10_000, 64, 6) == pytest.approx(64)
    # Monte Carlo: distinct experts hit by T tokens with k distinct random experts each
    rng = np.random.default_rng(0)
    counts = [len(np.unique(np.argsort(rng.random((5, 16)), axis=1)[:, :3])) for _ in range(4000)]
    assert np.mean(counts) == pytest.approx(expected_active_experts(5, 16, 3), rel=0.02)


def test_expert_parallel_reads_fewer_expert_bytes_per_token_and_holds_1_over_n():
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
