"""Parameter-efficient fine-tuning at scale: trainable-parameter counts and fine-tuning memory.

The counts follow the papers' own accounting:

* LoRA (Hu et al. 2021, arXiv:2106.09685): a d_in×d_out weight gets ΔW = A·B with A: d_in×r and
  B: r×d_out, so r·(d_in + d_out) trainable values; for the square d×d attention projections of a
  transformer that is 2·r·d per adapted matrix per layer (the paper's |Θ| = 2 × L̂_LoRA × d_model × r,
  with L̂_LoRA the number of adapted matrices over all layers).
* Adapters (Houlsby et al. 2019): a bottleneck d → r → d with biases, two per layer.
* Prefix tuning (Li & Liang 2021): L trainable key and value vectors per layer.
* QLoRA (Dettmers et al. 2023, arXiv:2305.14314): the frozen base in 4-bit NormalFloat with one
  absmax constant per 64 weights, itself quantized to 8 bits per block of 256 (double quantization).

Model shapes are lesson 06's :class:`~mlsys_lab.training_memory.accounting.TransformerShape`; the
counts here use its :attr:`~mlsys_lab.training_memory.accounting.TransformerShape.n_matrix_params`
(weight matrices and both embeddings, as the papers count). The runnable small-model versions of each
method live in :mod:`mlsys_lab.peft.models`; NF4 itself in :mod:`mlsys_lab.peft.nf4`.
"""

from __future__ import annotations

from mlsys_lab.training_memory.accounting import TRANSFORMER_SHAPES, TransformerShape
from mlsys_lab.training_memory.quantize import nf4_bits_per_param
from mlsys_lab.validation import check_choice, check_finite, check_int, check_positive, check_sequence, check_type

# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, d_ff = 4 d_model; BPE vocab 50257.
GPT3_175B = TRANSFORMER_SHAPES["GPT-3 175B"]
# LLaMA (Touvron et al. 2023, "LLaMA: open and efficient foundation language models", §2.2 and Table 2, and the
# released configs): pre-normalization with RMSNorm, SwiGLU MLPs of width 2/3·4d rounded up (three matrices), no
# biases, separate input and output embeddings of a 32000-token vocabulary. Table 2 lists 6.7B and 65.2B.
# LLaMA-65B: 80 layers, d 8192, 64 heads, SwiGLU d_ff 22016.
LLAMA_65B = TransformerShape("LLaMA-65B", n_layers=80, hidden=8192, n_heads=64, vocab=32000, d_ff=22016,
                             n_mlp_matrices=3, biases=False, norm="rmsnorm", tied_embeddings=False)
# LLaMA-7B: 32 layers, d 4096, 32 heads, SwiGLU d_ff 11008: 6,738,415,616 parameters.
LLAMA_7B = TransformerShape("LLaMA-7B", n_layers=32, hidden=4096, n_heads=32, vocab=32000, d_ff=11008,
                            n_mlp_matrices=3, biases=False, norm="rmsnorm", tied_embeddings=False)
MODELS = {m.name: m for m in (LLAMA_7B, LLAMA_65B, GPT3_175B)}

# LoRA paper, Table 4 (GPT-3 175B rows) and Section 7.1's 18M budget: (rank, targets) -> trainable params.
LORA_PAPER_GPT3 = {(1, ("q", "v")): 4.7e6, (8, ("q", "v")): 37.7e6,
                   (8, ("q",)): 18e6, (4, ("q", "v")): 18e6, (2, ("q", "k", "v", "o")): 18e6}
# LoRA paper, Table 4, the two GPT-3 (Adapter^H) rows: bottleneck r -> trainable params. The table prints
# only the counts; r = 1 and r = 8 (two adapters per layer, with biases) are the bottlenecks that give them.
ADAPTER_PAPER_GPT3 = {1: 7.1e6, 8: 40.1e6}


def lora_trainable_params(d_model: int, n_layers: int, rank: int, n_adapted_matrices: int = 2) -> int:
    """LoRA parameters for square d×d projections: 2 · r · d_model · n_adapted_matrices · n_layers."""
    check_int("d_model", d_model, low=1)
    check_int("n_layers", n_layers, low=1)
    check_int("rank", rank, low=1, high=d_model)
    check_int("n_adapted_matrices", n_adapted_matrices, low=1)
    return 2 * rank * d_model * n_adapted_matrices * n_layers


def lora_params_for_shapes(shapes: list[tuple[int, int]], rank: int, n_layers: int = 1) -> int:
    """LoRA parameters for weights of any shape: Σ r · (d_in + d_out), times ``n_layers``."""
    check_int("rank", rank, low=1)
    check_int("n_layers", n_layers, low=1)
    check_type("shapes", shapes, (list, tuple))
    total = 0
    for shape in shapes:
        if not isinstance(shape, (list, tuple)) or len(shape) != 2:
            raise TypeError(f"shapes must be a list of (d_in, d_out) pairs; got an entry {shape!r:.40}")
        d_in, d_out = shape
        check_int("d_in", d_in, low=1)
        check_int("d_out", d_out, low=1)
        total += rank * (d_in + d_out)
    return total * n_layers


def lora_params_for_model(model: TransformerShape, rank: int, targets: tuple[str, ...]) -> int:
    """LoRA parameters when ``targets`` (keys of ``model.linear_shapes()``) are adapted in all layers."""
    check_type("model", model, TransformerShape)
    check_sequence("targets", targets)
    shapes = model.linear_shapes()
    for t in targets:
        check_choice("targets", t, shapes)
    return lora_params_for_shapes([shapes[t] for t in targets], rank, model.n_layers)


def adapter_params(d_model: int, n_layers: int, bottleneck: int, adapters_per_layer: int = 2) -> int:
    """Houlsby adapters: each is down d→r and up r→d with biases, 2·r·d + r + d values."""
    check_int("d_model", d_model, low=1)
    check_int("n_layers", n_layers, low=1)
    check_int("bottleneck", bottleneck, low=1)
    check_int("adapters_per_layer", adapters_per_layer, low=1)
    return n_layers * adapters_per_layer * (2 * bottleneck * d_model + bottleneck + d_model)


def prefix_params(d_model: int, n_layers: int, prefix_len: int) -> int:
    """Prefix tuning: a key and a value vector per prefix position per layer, 2 · L · d · n_layers."""
    check_int("d_model", d_model, low=1)
    check_int("n_layers", n_layers, low=1)
    check_int("prefix_len", prefix_len, low=1)
    return 2 * prefix_len * d_model * n_layers


# --- memory -----------------------------------------------------------------------------------------

BASE_BITS = ("fp32", "bf16", "int8", "nf4", "nf4+dq")


def base_bits_per_param(quantization: str, block_size: int = 64, block_size2: int = 256) -> float:
    """Storage bits per frozen base weight, quantization constants included.

    int8 and nf4 keep one fp32 absmax per ``block_size`` weights: b + 32/block_size bits.
    nf4+dq quantizes those constants to 8 bits in blocks of ``block_size2`` with one fp32 each:
    4 + 8/64 + 32/(64·256) = 4.127 bits (QLoRA, Section 3).
    """
    check_choice("quantization", quantization, BASE_BITS)
    check_int("block_size", block_size, low=1)
    check_int("block_size2", block_size2, low=1)
    if quantization == "fp32":
        return 32.0
    if quantization == "bf16":
        return 16.0
    if quantization == "int8":
        return 8 + 32 / block_size
    return nf4_bits_per_param(block_size, double_quant=quantization == "nf4+dq", second_block=block_size2)


def full_finetune_bytes(n_params: float, bytes_per_param: float = 12.0) -> float:
    """Full fine-tuning memory without activations: 16-bit weights (2) + 16-bit gradients (2) + fp32 Adam (8).

    12 bytes/param reproduces QLoRA's ">780 GB" for a 65B model; a 4-byte fp32 master copy makes it 16.
    """
    check_positive("n_params", n_params)
    check_positive("bytes_per_param", bytes_per_param)
    return n_params * bytes_per_param


def lora_finetune_bytes(n_base_params: float, n_lora_params: float, quantization: str = "nf4+dq",
                        activation_bytes: float = 0.0) -> dict[str, float]:
    """Memory of LoRA/QLoRA fine-tuning, by part, in bytes.

    base: n_base · bits/8; LoRA weights and their gradients in bf16 (2 + 2 bytes); Adam's two fp32
    moments (8 bytes) for LoRA parameters only; plus ``activation_bytes`` you supply.
    """
    check_positive("n_base_params", n_base_params)
    check_positive("n_lora_params", n_lora_params)
    check_finite("activation_bytes", activation_bytes, low=0.0)
    return {"base weights": n_base_params * base_bits_per_param(quantization) / 8,
            "LoRA weights": 2.0 * n_lora_params,
            "LoRA gradients": 2.0 * n_lora_params,
            "Adam states": 8.0 * n_lora_params,
            "activations": float(activation_bytes)}


# The adapted-matrix choices of the memory explorer: None adapts every linear layer.
LORA_TARGET_SETS = {"q, v": ("q", "v"), "q, k, v, o": ("q", "k", "v", "o"), "all linear layers": None}


def peft_memory(model: str, rank: int, targets: str, quantization: str) -> dict:
    """LoRA/QLoRA fine-tuning memory by part (bytes), and full fine-tuning's, for a model of :data:`MODELS`.

    ``targets``: a key of :data:`LORA_TARGET_SETS`. Returns {"model": the shape, "n_lora": LoRA parameters,
    "parts": :func:`lora_finetune_bytes`, "full": :func:`full_finetune_bytes`}.
    """
    shape = MODELS[check_choice("model", model, MODELS)]
    chosen = LORA_TARGET_SETS[check_choice("targets", targets, LORA_TARGET_SETS)] or tuple(shape.linear_shapes())
    n_lora = lora_params_for_model(shape, rank, chosen)
    parts = lora_finetune_bytes(shape.n_matrix_params, n_lora, quantization)
    return {"model": shape, "n_lora": n_lora, "parts": parts, "full": full_finetune_bytes(shape.n_matrix_params)}
