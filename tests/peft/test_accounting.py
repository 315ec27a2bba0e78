"""Do the fine-tuning counts and memory figures match the LoRA and QLoRA papers?"""

import pytest

from mlsys_lab.peft.accounting import (
    ADAPTER_PAPER_GPT3,
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
    peft_memory,
    prefix_params,
)


@pytest.mark.parametrize(("rank", "targets"), list(LORA_PAPER_GPT3))
def test_lora_counts_reproduce_the_papers_gpt3_rows(rank, targets):
    got = lora_params_for_model(GPT3_175B, rank, targets)
    paper = LORA_PAPER_GPT3[(rank, targets)]
    # the paper prints 4.7M, 37.7M and "roughly 18M"
    assert got == pytest.approx(paper, rel=0.05)


@pytest.mark.parametrize("bottleneck", list(ADAPTER_PAPER_GPT3))
def test_adapter_counts_reproduce_the_lora_papers_table_4(bottleneck):
    """Adapter^H on GPT-3: 96 layers × 2 adapters × (2·r·12288 + r + 12288) = 7.08M (r = 1), 40.11M (r = 8)."""
    got = adapter_params(12288, 96, bottleneck)
    assert got == 96 * 2 * (2 * bottleneck * 12288 + bottleneck + 12288)
    assert round(got / 1e6, 1) == ADAPTER_PAPER_GPT3[bottleneck] / 1e6  # the paper prints one decimal


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
    total = sum(lora_finetune_bytes(LLAMA_65B.n_matrix_params, lora).values())
    assert 30e9 < total < 48e9


def test_llama_and_gpt3_sizes():
    assert LLAMA_65B.n_matrix_params == pytest.approx(65.2e9, rel=0.01)
    assert GPT3_175B.n_matrix_params == pytest.approx(175e9, rel=0.01)


def test_peft_memory_parts_add_up():
    result = peft_memory("LLaMA-7B", 8, "q, v", "nf4+dq")
    assert result["n_lora"] == 2 * 8 * (4096 + 4096) * 32
    assert result["parts"]["Adam states"] == 8 * result["n_lora"]
    assert result["full"] == 12 * result["model"].n_matrix_params
    every = peft_memory("LLaMA-7B", 1, "all linear layers", "bf16")
    assert every["n_lora"] == 32 * (4 * (4096 + 4096) + 3 * (4096 + 11008))  # q, k, v, o, gate, up, down at r=1
    with pytest.raises(ValueError, match="targets"):
        peft_memory("LLaMA-7B", 8, "q only", "nf4")
