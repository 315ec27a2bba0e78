"""Do the fine-tuning counts and memory figures match the LoRA and QLoRA papers?"""

import numpy as np
import pytest

from mlsys_lab.peft.accounting import (
    GPT3_175B,
    LLAMA_65B,
    LORA_PAPER_GPT3,
    adapter_params,
    base_bits_per_param,
    full_finetune_bytes,
    lora_finetune_bytes,
    lora_params_for_model,
    lora_params_for_shapes,
    lora_trainable_params,
    prefix_params,
)
from mlsys_lab.peft.nf4 import (
    NF4_BITSANDBYTES,
    double_dequantize,
    double_quantize,
    int4_levels,
    nf4_levels,
    quantization_rmse,
    quantize_blockwise,
)


@pytest.mark.parametrize(("rank", "targets"), list(LORA_PAPER_GPT3))
def test_lora_counts_reproduce_the_papers_gpt3_rows(rank, targets):
    got = lora_params_for_model(GPT3_175B, rank, targets)
    paper = LORA_PAPER_GPT3[(rank, targets)]
    # the paper prints 4.7M, 37.7M and "roughly 18M"
    assert got == pytest.approx(paper, rel=0.05)


def test_square_count_by_hand():
    # 2 · r · d per matrix per layer: r=4, W_q and W_v, 96 layers of d=12288
    assert lora_trainable_params(12288, 96, 4, 2) == 2 * 4 * 12288 * 2 * 96 == 18_874_368
    assert lora_trainable_params(12288, 96, 4, 2) * 2 / 1e6 == pytest.approx(37.7, abs=0.1)  # MB in fp16


def test_general_shapes_and_other_methods_by_hand():
    assert lora_params_for_shapes([(10, 20), (30, 5)], rank=2, n_layers=3) == 3 * 2 * (30 + 35)
    assert adapter_params(d_model=8, n_layers=2, bottleneck=3, adapters_per_layer=2) == 2 * 2 * (48 + 3 + 8)
    assert prefix_params(d_model=8, n_layers=2, prefix_len=5) == 160


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="rank"):
        lora_trainable_params(16, 2, 17)
    with pytest.raises(ValueError, match="targets"):
        lora_params_for_model(GPT3_175B, 4, ("q", "gate"))
    with pytest.raises(ValueError, match="quantization"):
        base_bits_per_param("fp8")


def test_qlora_bits_and_memory_match_the_paper():
    assert base_bits_per_param("nf4+dq") == pytest.approx(4.127, abs=5e-4)
    assert base_bits_per_param("nf4") == 4.5                       # 0.5 bits of constants without DQ
    assert full_finetune_bytes(65e9) == pytest.approx(780e9)         # "more than 780 GB"
    lora = lora_params_for_model(LLAMA_65B, 64, tuple(LLAMA_65B.linear_shapes()))
    total = sum(lora_finetune_bytes(LLAMA_65B.n_params(), lora).values())
    assert 30e9 < total < 48e9


def test_llama_and_gpt3_sizes():
    assert LLAMA_65B.n_params() == pytest.approx(65.2e9, rel=0.01)
    assert GPT3_175B.n_params() == pytest.approx(175e9, rel=0.01)


def test_nf4_levels_equal_the_bitsandbytes_table():
    np.testing.assert_allclose(nf4_levels(), NF4_BITSANDBYTES, atol=1e-6)


def test_nf4_beats_uniform_int4_on_normal_weights():
    weights = np.random.default_rng(0).normal(0, 0.02, size=64 * 512)
    assert quantization_rmse(weights, nf4_levels()) < quantization_rmse(weights, int4_levels())


def test_blockwise_quantization_keeps_the_absmax_exactly():
    weights = np.random.default_rng(1).normal(size=128).astype(np.float32)
    codes, absmax = quantize_blockwise(weights, nf4_levels(), 64)
    assert codes.max() <= 15 and absmax.shape == (2,)
    restored = nf4_levels()[codes].reshape(2, 64) * absmax[:, None]
    blocks = weights.reshape(2, 64)
    arg = np.abs(blocks).argmax(axis=1)
    np.testing.assert_allclose(restored[[0, 1], arg], blocks[[0, 1], arg], rtol=1e-6)
    with pytest.raises(ValueError, match="block_size"):
        quantize_blockwise(weights[:100], nf4_levels(), 64)


def test_double_quantization_roundtrip_error_is_small():
    absmax = np.random.default_rng(2).uniform(0.05, 0.1, size=1000).astype(np.float32)
    restored = double_dequantize(*double_quantize(absmax))
    assert np.abs(restored - absmax).max() < 0.03 / 127 * 1.01
