"""What one rank of the capstone's run holds, from first principles: the state it keeps and what a step adds.

**State** (between steps, and through them), per rank, in the model's dtype (s = 4 bytes in float32):

    θ                 s·Ψ          whole on every rank (ZeRO-1 shards only the optimizer)
    gradient          s·Ψ          the flat buffer ``loss_and_grad`` fills, whole: ZeRO-1 reduce-scatters it
    Adam m, v         2·s·Ψ        data parallel;  ZeRO-1: 2·s·Ψ_r, Ψ_r the rank's slice (about Ψ/p)

so 16 bytes per parameter in float32, the fp32-Adam row of lesson 06's table, and ZeRO-1 is lesson 08's
stage 1 (Rajbhandari et al. 2020, §5): θ + g + K·Ψ/N_d with K = 2s here (m and v; no fp32 master copy, since the
math is already in fp32). The terms come from :func:`mlsys_lab.parallelism.zero.zero_memory_breakdown`; only the
rank's m and v are counted from its exact slice (``np.array_split``'s, :func:`.zero.slice_sizes`), since the
paper's K·Ψ/N_d is their mean over the ranks.

**Activations** of one step: what the backward keeps, for the rank's B_r sequences of T positions (C = d_model,
H heads, V characters). ``model.transformer_block`` returns, per layer, the cache

    x (block input)  h1 = LN1(x), x̂1   att (heads merged)  q, k, v (views of one B·T·3C qkv)  probs (B·H·T·T)
    x2 (residual)    x̂2               the MLP's (h2, gelu'(u), gelu(u)): C + 4C + 4C per token

that is 18·C values per token and H·T per token for the attention probabilities, which grow with T²; and the
caches of all L layers stay alive until the backward ends (``loss_and_grad`` keeps the list). The step peaks
at the head, where on top of them live the last block's output, LNf's output and x̂, the logits and their
gradient (B·T·V each). Korthikanti et al. 2022 count (lesson 06's
:func:`~mlsys_lab.training_memory.accounting.transformer_layer_activation_bytes`) 16·s·b·h + 2·a·s²·b values and
dropout masks: this model has no dropout, keeps both x̂ and LN's output, and the GELU's derivative for its
input, hence 18 and 1 where they have 16 and 2 (they keep the scores and the probabilities).

NumPy's temporaries (the scores before the mask, the softmax's exponentials, the backward's products) come and
go and are not in the model: the measured peak (``dp_run --measure-memory``) is above it by their high-water mark.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.capstone.model import GPTConfig, count_params
from mlsys_lab.capstone.text import shard_rows
from mlsys_lab.capstone.zero import slice_sizes
from mlsys_lab.parallelism.zero import zero_memory_breakdown
from mlsys_lab.validation import check_bool, check_int, check_type


def _dense(config) -> GPTConfig:
    if check_type("config", config, GPTConfig).moe is not None:
        raise ValueError("config must have a dense MLP (moe=None): the model counts the dense MLP's cache")
    return config


def rank_state_bytes(config: GPTConfig, n_ranks: int = 1, rank: int = 0, zero1: bool = False) -> dict[str, int]:
    """Bytes of θ, the gradient, Adam's m and v on rank ``rank`` of ``n_ranks``, and their sum ``state``.

    ``zero1``: m and v are the rank's slice only (ZeRO stage 1); otherwise every rank holds them whole."""
    n_params = count_params(check_type("config", config, GPTConfig))
    p = check_int("n_ranks", n_ranks, low=1, high=min(n_params, 1 << 20))
    check_int("rank", rank, low=0, high=p - 1)
    s = int(np.dtype(config.dtype).itemsize)
    parts = zero_memory_breakdown(n_params, p, 1 if check_bool("zero1", zero1) else 0, s, 2 * s)
    held = slice_sizes(n_params, p)[rank] if zero1 else n_params
    terms = {"theta": int(parts["params"]), "gradient": int(parts["grads"]), "adam_m": s * held, "adam_v": s * held}
    return {**terms, "state": sum(terms.values())}


def step_activation_bytes(config: GPTConfig, batch_rows: int) -> dict[str, int]:
    """Bytes of what one step keeps for the backward on ``batch_rows`` sequences of ``config.context`` positions,
    named term by term (each over all L layers), and their sum ``activations``."""
    c, t, h, v, n_layers = _dense(config).d_model, config.context, config.n_heads, config.vocab_size, config.n_layers
    tokens = check_int("batch_rows", batch_rows, low=1, high=1 << 20) * t
    s = int(np.dtype(config.dtype).itemsize)
    per_layer_values = {  # values per token, per layer
        "block_input": c, "ln1_out": c, "ln1_xhat": c, "qkv": 3 * c, "attention_probs": h * t, "attention_out": c,
        "residual_mid": c, "ln2_xhat": c, "ln2_out": c, "gelu_out": 4 * c, "gelu_grad": 4 * c,
    }
    terms = {name: s * tokens * n_layers * values for name, values in per_layer_values.items()}
    terms.update({"final_x": s * tokens * c, "lnf_out_xhat": 2 * s * tokens * c, "logits": s * tokens * v,
                  "dlogits": s * tokens * v})
    return {**terms, "activations": sum(terms.values())}


def rank_memory_model(config: GPTConfig, batch_size: int, n_ranks: int = 1, rank: int = 0,
                      zero1: bool = False) -> dict[str, int]:
    """The model of rank ``rank``'s memory in a step of a global batch of ``batch_size`` sequences split over
    ``n_ranks`` ranks (:func:`.text.shard_rows`): :func:`rank_state_bytes`, ``activations`` of its rows
    (:func:`step_activation_bytes`), and ``total`` = state + activations, what the measured peak is set beside."""
    check_int("batch_size", batch_size, low=1, high=1 << 20)
    state = rank_state_bytes(config, n_ranks, rank, zero1)
    rows = len(shard_rows(batch_size, n_ranks)[rank])
    activations = step_activation_bytes(config, rows)["activations"]
    return {**state, "activations": activations, "total": state["state"] + activations}
