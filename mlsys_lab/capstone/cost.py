"""What a data-parallel step of the capstone's model should cost: FLOPs per token, and the α-β time of its all-reduce.

FLOPs of one token, forward (multiply-adds count 2; Kaplan et al. 2020, Table 1, with the attention term):

    per layer   2·(3C·C + C·C + 4C·C + 4C·C) = 24·C²   the four matmuls (qkv, projection, fc, out)
                + 2·2·T·C                             scores q·kᵀ and the weighted sum of v, over all T positions
    head        2·C·V

and the backward costs twice the forward, so a training step costs 3 × forward per token. A data-parallel step on
p ranks computes 1/p of the tokens on each rank and then all-reduces the whole gradient (θ's size in its dtype)
with the ring: 2(p−1)·α + 2(p−1)/p · n_bytes · β (lesson 07, :func:`mlsys_lab.collectives.cost.allreduce_time`).
"""

from __future__ import annotations

from mlsys_lab.capstone.model import GPTConfig, count_params
from mlsys_lab.collectives.cost import allreduce_time
from mlsys_lab.units import BYTES_PER_DTYPE
from mlsys_lab.validation import check_int, check_positive, check_type


def flops_per_token(config: GPTConfig) -> float:
    """Training FLOPs of one token: 3 × (L·(24·C² + 4·T·C) + 2·C·V)."""
    c, t = check_type("config", config, GPTConfig).d_model, config.context
    return 3.0 * (config.n_layers * (24 * c * c + 4 * t * c) + 2 * c * config.vocab_size)


def gradient_bytes(config: GPTConfig) -> int:
    """Bytes of the gradient every rank all-reduces each step: θ's size in the model's dtype."""
    check_type("config", config, GPTConfig)
    return count_params(config) * BYTES_PER_DTYPE["fp32" if config.dtype == "float32" else "fp64"]


def dp_step_seconds(config: GPTConfig, batch_size: int, n_ranks: int, flop_per_s: float, alpha: float,
                    beta: float) -> dict[str, float]:
    """Predicted seconds of one data-parallel step: compute of 1/p of the batch's tokens, then the ring all-reduce.

    ``alpha`` seconds per message, ``beta`` seconds per byte. Returns compute_s, allreduce_s, step_s and the
    share of the step spent communicating (the all-reduce does not overlap the backward here).
    """
    check_type("config", config, GPTConfig)
    check_int("batch_size", batch_size, low=1)
    check_int("n_ranks", n_ranks, low=1, high=1 << 20)
    check_positive("flop_per_s", flop_per_s)
    tokens = batch_size * config.context
    compute = flops_per_token(config) * tokens / n_ranks / flop_per_s
    comm = float(allreduce_time("ring", gradient_bytes(config), n_ranks, alpha, beta))
    return {"compute_s": compute, "allreduce_s": comm, "step_s": compute + comm,
            "comm_share": comm / (compute + comm)}
