"""Lesson 10, parameter-efficient fine-tuning: adapters, prefix tuning, LoRA and QLoRA, counted and trained.

    from mlsys_lab.peft import LLAMA_65B, lora_params_for_model, lora_finetune_bytes
    n_lora = lora_params_for_model(LLAMA_65B, 64, tuple(LLAMA_65B.linear_shapes()))   # r=64 on every linear
    sum(lora_finetune_bytes(LLAMA_65B.n_matrix_params, n_lora, "nf4+dq").values())  # ≈ 43 GB: one 48 GB GPU

Modules, in the order of the lesson:

* :mod:`.accounting`: Parameter-efficient fine-tuning at scale: trainable-parameter counts and fine-tuning memory.
* :mod:`.models`: A one-block transformer classifier with four ways to fine-tune it, forward and backward by hand.
* :mod:`.finetune`: Pre-train the tiny transformer on one synthetic task, then fine-tune it on a shifted one, four ways.
* :mod:`.nf4`: NF4 storage as QLoRA keeps it: 4-bit codes, block-wise absmax constants, and those constants in 8 bits.
* :mod:`.qlora`: QLoRA training: LoRA adapters on a frozen base kept as NF4 codes, dequantized on the fly.

Model shapes (``TransformerShape``), NF4 levels and the block-wise quantizer come from lesson 06,
:mod:`mlsys_lab.training_memory`; Adam and the losses from the floor, :mod:`mlsys_lab.nn`.
"""

from mlsys_lab.peft.accounting import (
    GPT3_175B,
    LLAMA_7B,
    LLAMA_65B,
    MODELS,
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
from mlsys_lab.peft.finetune import (
    compare_methods,
    finetune,
    inference_variants,
    make_task,
    nf4_base,
    pretrain_base,
    qlora_finetune,
    step_seconds,
    task_accuracy,
    train_classifier,
)
from mlsys_lab.peft.models import METHODS, TinyConfig, add_method, init_base, merge_lora, step_flops
from mlsys_lab.peft.nf4 import (
    double_dequantize,
    double_quantize,
    int4_levels,
    nf4_dequantize,
    nf4_quantize,
    quantization_rmse,
)
from mlsys_lab.peft.qlora import init_qlora_state, lora_linear_backward, qlora_step, train_qlora

__all__ = [
    "GPT3_175B",
    "LLAMA_65B",
    "LLAMA_7B",
    "METHODS",
    "MODELS",
    "TinyConfig",
    "adapter_params",
    "add_method",
    "base_bits_per_param",
    "compare_methods",
    "double_dequantize",
    "double_quantize",
    "finetune",
    "full_finetune_bytes",
    "inference_variants",
    "init_base",
    "init_qlora_state",
    "int4_levels",
    "lora_finetune_bytes",
    "lora_linear_backward",
    "lora_params_for_model",
    "lora_params_for_shapes",
    "lora_trainable_params",
    "make_task",
    "merge_lora",
    "nf4_base",
    "nf4_dequantize",
    "nf4_quantize",
    "peft_memory",
    "prefix_params",
    "pretrain_base",
    "qlora_finetune",
    "qlora_step",
    "quantization_rmse",
    "step_flops",
    "step_seconds",
    "task_accuracy",
    "train_classifier",
    "train_qlora",
]
