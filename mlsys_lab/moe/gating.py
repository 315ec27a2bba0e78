"""Mixture-of-experts routing: gates, top-k, capacity and overflow, and the load-balancing loss.

y(x) = Σᵢ G(x)ᵢ · Eᵢ(x) over n experts; only experts with G(x)ᵢ ≠ 0 are computed.

* Softmax gate: G(x) = softmax(x W_g) (dense: every expert runs).
* Top-k gate (Shazeer et al. 2017, eq. 3–5): G(x) = softmax(KeepTopK(H(x), k)), with the noisy
  logits H(x)ᵢ = (x W_g)ᵢ + N(0, 1) · softplus((x W_noise)ᵢ) during training.
* Switch gate (Fedus et al. 2022): the top-k of softmax(x W_g), each keeping its probability as gate value.
  Both gates choose their experts with the one top-k, :func:`top_k_experts`.
* Capacity (Switch Transformer, Fedus et al. 2022, eq. 3; GShard, Lepikhin et al. 2020):
  each expert takes at most ⌈k · tokens / n_experts · capacity_factor⌉ tokens; the rest overflow,
  skip the expert and pass through the residual connection unchanged.
* Auxiliary loss (Switch, eq. 4): α · N · Σᵢ fᵢ · Pᵢ, fᵢ the fraction of routed tokens sent to i,
  Pᵢ the mean router probability for i. It equals α whenever f or P is uniform, but it is *not* minimised by
  balance: six tokens at probabilities (0.51, 0.49) and four at (0, 1) route 60/40 and give 0.922 α. It is a
  pressure (its gradient lowers the probability of the loaded experts), not a guarantee of balance.

Arrays are ``xp`` or NumPy arrays: logits (T, n), indices and weights (T, k).
"""

from __future__ import annotations

import math

import numpy as np

from mlsys_lab.backend import asnumpy, module_of, xp
from mlsys_lab.nn import softmax
from mlsys_lab.validation import (
    check_array,
    check_finite,
    check_index_array,
    check_int,
    check_number,
    check_positive,
    check_type,
)

MAX_EXPERTS = 2**16  # far beyond any MoE (DeepSeek-V3: 256); the capacity arithmetic builds (T·k, n) arrays


def top_k_experts(scores, k: int):
    """(T, k) indices of the k largest ``scores`` per token, best first: KeepTopK's selection (Shazeer et al.).

    The one top-k of the course: :func:`top_k_gating`, :func:`switch_gating`, expert parallelism
    (:mod:`mlsys_lab.parallelism.ep`) and the MPI layer (:mod:`.mpi_dispatch`) all choose experts here.
    NumPy in, NumPy out; CuPy in, CuPy out.
    """
    check_array("scores", scores, ndim=2, kinds="fiu")
    check_int("k", k, low=1, high=scores.shape[-1])
    return module_of(scores).argsort(-scores, axis=-1)[:, :k]                # (T, k), best first


def top_k_gating(logits, k: int):
    """(indices (T, k), weights (T, k)): the k largest logits per token, renormalised by a softmax over them.

    Indices are ordered best first. Softmax over the kept logits equals softmax(KeepTopK(H, k)) of
    Shazeer et al., where dropped logits are set to −∞; GShard and expert parallelism use these weights.
    """
    order = top_k_experts(check_array("logits", logits, ndim=2, kinds="fiu"), k)  # (T, k)
    kept = module_of(logits).take_along_axis(logits, order, axis=-1)          # (T, k)
    weights = module_of(kept).exp(kept - kept[:, :1])  # softmax over the k kept: the best one is the row's max
    return order, weights / weights.sum(axis=-1, keepdims=True)


def switch_gating(logits, k: int = 1):
    """(probs (T, n), indices (T, k), gate (T, k)): Switch Transformer's gate (Fedus et al. 2022, Section 2.1).

    probs = softmax(logits) over all n experts; the k most probable are chosen and each keeps its router
    probability as its gate value, not renormalised over the k, so the router gets a gradient even for k = 1.
    """
    probs = softmax(check_array("logits", logits, ndim=2, kinds="fiu"))       # (T, n)
    indices = top_k_experts(probs, k)                                         # (T, k)
    return probs, indices, xp.take_along_axis(probs, indices, axis=-1)


def noisy_logits(x, w_gate, w_noise, rng: np.random.Generator):
    """H(x) = x W_g + ε · softplus(x W_noise), ε ~ N(0, 1) per token and expert (Shazeer et al. eq. 4)."""
    check_type("rng", rng, np.random.Generator)
    x = check_array("x", x, ndim=2, kinds="f")
    for name, w in (("w_gate", w_gate), ("w_noise", w_noise)):
        if check_array(name, w, ndim=2, kinds="f").shape[0] != x.shape[1]:
            raise ValueError(f"{name} must have one row per feature of x ({x.shape[1]}); got shape {w.shape}")
    if w_noise.shape != w_gate.shape:
        raise ValueError(f"w_noise must have the shape of w_gate {w_gate.shape}; got {w_noise.shape}")
    clean, raw_noise = x @ w_gate, x @ w_noise
    eps = xp.asarray(rng.standard_normal(clean.shape).astype(np.float32))
    return clean + eps * xp.logaddexp(0, raw_noise)  # softplus(z) = log(1 + e^z)


def gates_dense(indices, weights, n_experts: int):
    """Scatter (T, k) indices and weights into the (T, n) gate matrix G(x), zeros elsewhere."""
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    indices = check_array("indices", indices, ndim=2, kinds="iu", min_size=0)
    weights = check_array("weights", weights, ndim=2, kinds="f", min_size=0)
    if weights.shape != indices.shape:
        raise ValueError(f"weights must have the shape of indices {indices.shape}; got {weights.shape}")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_experts):
        raise ValueError(f"indices must lie in [0, {n_experts - 1}] for n_experts={n_experts}")
    gates = xp.zeros((indices.shape[0], n_experts), dtype=weights.dtype)
    gates[xp.arange(indices.shape[0])[:, None], indices] = weights
    return gates


def expert_capacity(n_tokens: int, n_experts: int, capacity_factor: float, top_k: int = 1) -> int:
    """Tokens one expert may take: ⌈top_k · n_tokens / n_experts · capacity_factor⌉, rounded *up*.

    The k factor and the ceiling follow the papers and DeepSpeed-MoE: Switch Transformer eq. 3 with top_k = 1;
    GShard's paper, 2N/E, with top_k = 2 and factor 1; DeepSpeed-MoE's top-2 gate doubles the factor and rounds up
    (``torch.ceil``). Other code differs in both: Mesh-TensorFlow's MoE layer (``transformer_moe_layer_v1``, the
    code Switch Transformer was written in) takes min(group, int(group · factor / experts)): rounded down, and no
    k factor even for its top-2 gate, whose factor must cover both choices; GShard itself was written in Lingvo
    (its GShard layers, on XLA's sharding annotations), not Mesh-TensorFlow, and sizes the capacity from group ·
    factor / experts as well. Rounding up is the choice here because a capacity below the mean load would drop
    tokens even from a perfectly balanced router, and a small batch (64 tokens, 128 experts, factor 1) would get
    capacity 0 and drop everything; the two roundings differ by at most one slot.
    """
    check_int("n_tokens", n_tokens, low=1)
    check_int("n_experts", n_experts, low=1)
    check_positive("capacity_factor", capacity_factor)
    check_int("top_k", top_k, low=1, high=n_experts)
    # round first so that 1.25 * 64 / 8 * ... does not become 10.000000001 -> 11
    return int(math.ceil(round(top_k * n_tokens * capacity_factor / n_experts, 9)))


def assign_with_capacity(indices, n_experts: int, capacity: int, routed=None) -> tuple[np.ndarray, np.ndarray]:
    """Which routed (token, choice) pairs an expert accepts, in GShard/Switch priority order.

    All first choices are placed before any second choice; within one choice level, earlier tokens
    first. ``routed`` (T, k) bool, optional: pairs that are sent at all (GShard's random second expert,
    :func:`gshard_second_expert_mask`); the others take no place and are not kept. Returns (kept (T, k)
    bool, slot (T, k) int: the position in the expert's buffer, −1 if dropped or not sent).
    Runs on NumPy (a cumulative count per expert).
    """
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    idx = check_index_array("indices", indices, n_experts, of_name="n_experts")
    check_int("capacity", capacity, low=0)
    if idx.ndim != 2:
        raise ValueError(f"indices must be a 2-D (n_tokens, k) array; got shape {idx.shape}")
    n_tokens, k = idx.shape
    sent = np.ones(idx.shape, dtype=bool) if routed is None else np.asarray(routed, dtype=bool)
    if sent.shape != idx.shape:
        raise ValueError(f"routed must have the shape of indices {idx.shape}; got {sent.shape}")
    order = idx.T.reshape(-1)                                   # choice-major: all 1st choices first
    onehot = (order[:, None] == np.arange(n_experts)[None, :]) & sent.T.reshape(-1)[:, None]  # (k·T, n)
    position = (np.cumsum(onehot, axis=0) - 1)[np.arange(order.size), order]
    slot = position.reshape(k, n_tokens).T
    kept = (slot < capacity) & sent
    return kept, np.where(kept, slot, -1)


def drop_fraction(indices, n_experts: int, capacity_factor: float, routed=None) -> float:
    """Fraction of the sent (token, choice) pairs that overflow at ``capacity_factor`` (all pairs, or ``routed``).

    The capacity is :func:`expert_capacity` of all T tokens at top-k, whether or not a pair is sent.
    """
    check_finite("capacity_factor", capacity_factor, low=0.0, low_inclusive=False)
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    indices = check_index_array("indices", indices, n_experts, of_name="n_experts")
    if indices.ndim != 2:
        raise ValueError(f"indices must be a 2-D (n_tokens, k) array; got shape {indices.shape}")
    n_tokens, k = indices.shape
    cap = expert_capacity(n_tokens, n_experts, capacity_factor, k)
    kept, _ = assign_with_capacity(indices, n_experts, cap, routed)
    if routed is None:
        return float(1.0 - kept.mean())
    return float(1 - kept.sum() / np.asarray(routed, dtype=bool).sum())


def gshard_second_expert_mask(weights, rng: np.random.Generator) -> np.ndarray:
    """GShard's random routing as its paper writes it (Lepikhin et al. 2020, Algorithm 1; fairseq's Top2Gate does
    the same): keep expert 2 with prob. min(1, 2·g₂).

    ``weights`` (T, 2) are the top-2 gates normalised to g₁ + g₂ = 1. A token whose second gate is
    small is usually sent to its first expert only, saving capacity. Returns a (T, 2) bool mask.
    The code behind the papers uses another rule: Lingvo's GShard gating and Mesh-TensorFlow's "random" policy
    keep expert 2 with prob. min(1, g₂ / threshold), a parameter (Mesh-TensorFlow's default 0.2: 5·g₂).
    """
    check_type("rng", rng, np.random.Generator)
    w = np.asarray(check_array("weights", asnumpy(weights), kinds="f", finite=True, min_size=0))
    if w.ndim != 2 or w.shape[1] != 2:
        raise ValueError(f"weights must have shape (n_tokens, 2); got {w.shape}")
    g2 = w[:, 1] / w.sum(axis=1)
    keep_second = rng.uniform(size=g2.shape) < 2 * g2
    return np.stack([np.ones_like(keep_second), keep_second], axis=1)


def expert_fractions(expert_indices, n_experts: int):
    """fᵢ: the fraction of routed (token, choice) pairs that go to expert i (sums to 1)."""
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    expert_indices = check_array("expert_indices", expert_indices, kinds="iu")
    if int(expert_indices.min()) < 0 or int(expert_indices.max()) >= n_experts:
        raise ValueError(f"expert_indices must lie in [0, {n_experts - 1}] for n_experts={n_experts}")
    flat = expert_indices.reshape(-1)
    return module_of(flat).bincount(flat, minlength=n_experts)[:n_experts] / flat.size


def load_balancing_loss(router_probs, expert_indices) -> float:
    """Switch Transformer's auxiliary loss without α: N · Σᵢ fᵢ · Pᵢ.

    ``router_probs`` (T, N): softmax of the router logits; ``expert_indices`` (T,) or (T, k): the chosen
    experts. Pᵢ = mean over tokens of router_probs[:, i]. Equals 1 when routing or mean probabilities are
    uniform (and can fall below 1 for unbalanced routing), and up to N when every token goes to one expert with
    probability 1. With (T, k) indices fᵢ counts over the T·k pairs, so the loss is 1 at balance for any k, as
    DeepSeekMoE normalises it; Hugging Face's ``load_balancing_loss_func`` divides by T and gives k.
    """
    if getattr(router_probs, "ndim", None) != 2:
        raise ValueError(f"router_probs must be a 2-D (n_tokens, n_experts) array; got {type(router_probs).__name__} "
                         f"of shape {getattr(router_probs, 'shape', None)}")
    n_tokens, n_experts = router_probs.shape
    checked = check_index_array("expert_indices", expert_indices, n_experts, of_name="n_experts")
    if checked.ndim not in (1, 2) or checked.shape[0] != n_tokens or checked.size == 0:
        raise ValueError(f"expert_indices must have shape ({n_tokens},) or ({n_tokens}, k) to match router_probs "
                         f"{router_probs.shape}; got {checked.shape}")
    if not hasattr(expert_indices, "reshape"):
        expert_indices = checked
    idx = expert_indices.reshape(n_tokens, -1)
    f = expert_fractions(idx, n_experts)
    p_mean = router_probs.mean(axis=0)
    return float(n_experts * (f * p_mean).sum())


def load_balancing_grad(router_probs, expert_indices):
    """d(N · Σ fᵢ Pᵢ) / d router_probs: N · fᵢ / T in every row (f is a count, it carries no gradient)."""
    router_probs = check_array("router_probs", router_probs, ndim=2, kinds="f")
    expert_indices = check_array("expert_indices", expert_indices, ndim=(1, 2), kinds="iu")
    n_tokens, n_experts = router_probs.shape
    if expert_indices.shape[0] != n_tokens:
        raise ValueError(f"expert_indices must have shape ({n_tokens},) or ({n_tokens}, k) to match router_probs "
                         f"{router_probs.shape}; got {expert_indices.shape}")
    f = expert_fractions(expert_indices.reshape(n_tokens, -1), n_experts)
    return module_of(router_probs).broadcast_to(n_experts * f / n_tokens, router_probs.shape).astype(router_probs.dtype)


def coefficient_of_variation(load) -> float:
    """std / mean of per-expert load: 0 when balanced (used by Shazeer et al.'s importance loss)."""
    load = np.asarray(check_array("load", load, finite=True), dtype=float)
    check_number("mean load", float(load.mean()), low=0, low_inclusive=False)
    return float(load.std() / load.mean())


def aux_loss_and_grad(router_logits, k: int) -> tuple[float, np.ndarray]:
    """(N · Σᵢ fᵢ Pᵢ, its gradient with respect to the logits (T, N)): Switch's auxiliary loss without α, from logits.

    probs = softmax(logits) per token; the k most probable experts are chosen; fᵢ = share of the T·k
    (token, choice) pairs sent to i (a count: no gradient), Pᵢ = mean of probs[:, i]. 1 at perfect balance
    (DeepSeekMoE's normalisation; Hugging Face's divides by T instead of T·k, which gives k). The gradient
    goes through the softmax: with gᵢ = N fᵢ / T, d loss / d logits[t] = p_t ⊙ (g − p_t · g).
    """
    router_logits = check_array("router_logits", router_logits, ndim=2, kinds="f", finite=True)
    check_int("k", k, low=1, high=router_logits.shape[1])
    z = router_logits - router_logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    n_tokens, n_experts = probs.shape
    indices = top_k_experts(probs, k)
    f = np.bincount(indices.ravel(), minlength=n_experts) / indices.size
    loss = float(n_experts * np.sum(f * probs.mean(axis=0)))
    g = n_experts * f / n_tokens                                              # d loss / d probs, every row
    return loss, probs * (g - (probs * g).sum(axis=1, keepdims=True))
