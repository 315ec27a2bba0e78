"""KV cache, decode step and diffusion counts against published figures and hand-worked values."""

import pytest

from mlsys_lab.operators.workloads import decode_step, diffusion_evaluations, kv_cache_bytes


def test_kv_cache_matches_the_vllm_paper_opt_13b_figure():
    # Kwon et al. 2023 (vLLM), §3: OPT-13B "the KV cache of a single token demands 800 KB ... 2 (key and value)
    # x 5120 (hidden state size) x 40 (number of layers) x 2 (bytes per FP16)"; 40 heads of 128 = 5120.
    assert kv_cache_bytes(n_layers=40, n_kv_heads=40, head_dim=128) == 2 * 5120 * 40 * 2 == 819_200


def test_grouped_query_attention_divides_the_cache():
    # Llama 2 70B: 80 layers, 64 query heads, 8 KV heads of 128 (Touvron et al. 2023, GQA).
    per_token = kv_cache_bytes(80, 8, 128)
    assert per_token == 327_680  # 320 KiB
    assert kv_cache_bytes(80, 64, 128) == 8 * per_token  # the same model with multi-head attention
    assert kv_cache_bytes(80, 8, 128, seq_len=4096, batch=8) == pytest.approx(10 * 2**30)  # 10 GiB


def test_decode_step_is_memory_bound_at_batch_one():
    step = decode_step(70e9, kv_cache_bytes(80, 8, 128), context=4096, batch=1)
    assert step.flop == 140e9 and step.weight_bytes == 140e9 and step.n_bytes == 140e9 + step.kv_bytes
    assert step.kv_bytes == pytest.approx(1.25 * 2**30)
    assert step.intensity < 1.0
    assert step.seconds_lower_bound == pytest.approx((140e9 + 1.25 * 2**30) / 4.8e12)


def test_diffusion_evaluations_and_bad_input():
    assert diffusion_evaluations(1, 50) == 100 and diffusion_evaluations(4, 1000, guidance=False) == 4000
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        diffusion_evaluations(1, 0)
    with pytest.raises(ValueError, match="n_layers"):
        kv_cache_bytes(0, 8, 128)
