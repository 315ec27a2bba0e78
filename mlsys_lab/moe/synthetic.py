"""Synthetic routed batches: random router logits with a skew, a routed batch as the explorer draws it,
and random inputs for the expert-FFN kernels.

A router is *skewed* when some experts are preferred for every token. Here the logits are N(0, 1) plus
skew · a preference that falls linearly from expert 0 to the last, so skew = 0 routes uniformly and a
larger skew piles tokens onto the first experts (what a router without a balancing loss drifts into).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.moe.gating import (
    assign_with_capacity,
    expert_capacity,
    gates_dense,
    load_balancing_loss,
    top_k_gating,
)
from mlsys_lab.nn import softmax
from mlsys_lab.validation import check_finite, check_int, check_type

MAX_VALUES = 2**26  # values in one synthetic array: 512 MiB of float64


_NO_TOP_K = object()


def _check_routing_sizes(n_tokens: int, n_experts: int, top_k=_NO_TOP_K) -> None:
    check_int("n_tokens", n_tokens, low=1, high=2**24)
    check_int("n_experts", n_experts, low=1, high=4096)
    if n_tokens * n_experts > MAX_VALUES:
        raise ValueError(f"n_tokens x n_experts must be at most {MAX_VALUES} logits; got {n_tokens} x {n_experts}")
    if top_k is not _NO_TOP_K and check_int("top_k", top_k, low=1) > n_experts:
        raise ValueError(f"top_k must be at most n_experts={n_experts} (distinct experts per token); got {top_k}")


def skewed_router_logits(rng: np.random.Generator, n_tokens: int, n_experts: int, skew: float,
                         last_preference: float = -1.0) -> np.ndarray:
    """(n_tokens, n_experts) float64 logits: N(0, 1) + skew · linspace(1, ``last_preference``, n_experts).

    Draws one (n_tokens, n_experts) normal block from ``rng``.
    """
    check_type("rng", rng, np.random.Generator)
    _check_routing_sizes(n_tokens, n_experts)
    skew, last_preference = check_finite("skew", skew), check_finite("last_preference", last_preference)
    return rng.normal(size=(n_tokens, n_experts)) + skew * np.linspace(1, last_preference, n_experts)


def route_batch(n_tokens: int, n_experts: int, top_k: int, capacity_factor: float, skew: float,
                seed: int = 0) -> dict:
    """Route random tokens (float32 logits of :func:`skewed_router_logits`) top-k with expert capacity.

    Returns ``picture`` (T, n) int: 0 = not routed, 1 = routed and kept, 2 = routed but over capacity;
    ``load`` (n,): routed pairs per expert; ``capacity`` (tokens per expert, :func:`expert_capacity`);
    ``drop_fraction`` of the routed pairs; ``aux_loss`` N·Σ fᵢ Pᵢ (1 = balanced); ``gates`` (T, n).
    """
    _check_routing_sizes(n_tokens, n_experts, top_k)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    logits = xp.asarray(skewed_router_logits(rng, n_tokens, n_experts, skew).astype(np.float32))
    idx, weights = top_k_gating(logits, top_k)
    capacity = expert_capacity(n_tokens, n_experts, capacity_factor, top_k)
    kept, _ = assign_with_capacity(idx, n_experts, capacity)
    idx_np = asnumpy(idx)
    picture = np.zeros((n_tokens, n_experts), dtype=int)                       # (T, n)
    rows = np.repeat(np.arange(n_tokens), top_k)
    picture[rows, idx_np.reshape(-1)] = np.where(kept.reshape(-1), 1, 2)
    load = np.bincount(idx_np.reshape(-1), minlength=n_experts)
    return {"picture": picture, "load": load, "capacity": capacity, "drop_fraction": float(1 - kept.mean()),
            "aux_loss": load_balancing_loss(softmax(logits), idx),
            "gates": asnumpy(gates_dense(idx, weights, n_experts))}


def random_routing(n_tokens: int, n_experts: int, top_k: int, d_model: int, d_ff: int, dtype=np.float32,
                   seed: int = 0, skew: float = 0.0):
    """Inputs of the expert-FFN functions (:mod:`mlsys_lab.kernels.moe.expert_ffn`) as ``xp`` arrays:
    x (T, d), idx (T, k) distinct experts per token, gate (T, k) summing to 1, w1 (n, d, f), w2 (n, f, d).

    Router logits are :func:`skewed_router_logits` with a preference falling from 1 to 0 (``skew`` > 0 makes
    the first experts more popular); weights are scaled by 1/√fan-in.
    """
    _check_routing_sizes(n_tokens, n_experts, top_k)
    check_int("d_model", d_model, low=1, high=2**14)  # Mixtral's d_ff is 14336
    check_int("d_ff", d_ff, low=1, high=2**14)
    if max(n_tokens, n_experts * d_ff) * d_model > MAX_VALUES:
        raise ValueError(f"x (n_tokens x d_model) and w1 (n_experts x d_model x d_ff) must each be at most "
                         f"{MAX_VALUES} values; got n_tokens={n_tokens}, n_experts={n_experts}, d_model={d_model}, "
                         f"d_ff={d_ff}")
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        kind = "?"
    if kind != "f":
        raise TypeError(f"dtype must be a float dtype (np.float32, np.float64); got {dtype!r:.40}")
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    idx, gate = top_k_gating(skewed_router_logits(rng, n_tokens, n_experts, skew, last_preference=0.0), top_k)
    x = rng.normal(size=(n_tokens, d_model))
    w1 = rng.normal(0, d_model**-0.5, size=(n_experts, d_model, d_ff))
    w2 = rng.normal(0, d_ff**-0.5, size=(n_experts, d_ff, d_model))
    return (xp.asarray(x.astype(dtype)), xp.asarray(idx), xp.asarray(gate.astype(dtype)),
            xp.asarray(w1.astype(dtype)), xp.asarray(w2.astype(dtype)))
