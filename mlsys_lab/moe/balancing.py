"""Two more ways to keep a router healthy: DeepSeek-V3's bias balancing and ST-MoE's router z-loss.

* **Auxiliary-loss-free balancing** (DeepSeek-V3, Liu et al. 2024, §2.1.2): each expert i has a bias bᵢ that is
  added to its affinity score *only to choose* the top-k; the gate values still come from the unbiased scores.
  After each step, bᵢ ← bᵢ + γ if expert i was under-loaded and bᵢ − γ if over-loaded (γ the bias update
  speed). No loss term, so no gradient fights the language-model loss; the load evens out through selection alone.
* **Router z-loss** (ST-MoE, Zoph et al. 2022, eq. 5): L_z = (1/T) Σ_t (log Σ_j exp(x_tj))², which keeps the
  router logits x small. Large logits make the softmax saturate and lose precision in bf16; the loss leaves
  the *differences* between logits (the routing) nearly alone. Its gradient is 2·lse_t·softmax(x_t) per token.

NumPy arrays: scores and logits (T, n), bias and load (n,).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_finite, check_int


def _scores(name: str, scores) -> np.ndarray:
    array = check_array(name, scores, finite=True, min_size=0)
    if array.ndim != 2 or array.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D (n_tokens, n_experts) array; got shape {array.shape}")
    return np.asarray(array, dtype=float)


def biased_top_k(scores, bias, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (T, k), gates (T, k)): experts chosen by ``scores + bias``, gates from the unbiased scores.

    DeepSeek-V3 eq. 16: gᵢ = sᵢ if sᵢ + bᵢ is among the top-k of the biased scores; the chosen gates are then
    normalised to sum to 1 (its sigmoid affinities; any positive scores work here).
    """
    s = _scores("scores", scores)
    b = np.asarray(check_array("bias", bias, finite=True, min_size=0), dtype=float)
    if b.shape != (s.shape[1],):
        raise ValueError(f"bias must have shape ({s.shape[1]},), one per column of scores {s.shape}; got {b.shape}")
    check_int("k", k, low=1, high=s.shape[1])
    indices = np.argsort(-(s + b), axis=1, kind="stable")[:, :k]
    gates = np.take_along_axis(s, indices, axis=1)
    return indices, gates / gates.sum(axis=1, keepdims=True)


def update_bias(bias, load, speed: float) -> np.ndarray:
    """bᵢ + γ·sign(mean load − loadᵢ): raise the under-loaded experts' bias, lower the over-loaded ones'."""
    b = np.asarray(check_array("bias", bias, finite=True), dtype=float)  # any sign: a bias only ranks experts
    counts = np.asarray(check_array("load", load, finite=True), dtype=float)
    if counts.shape != b.shape:
        raise ValueError(f"load must have the shape of bias {b.shape}; got {counts.shape}")
    if counts.min() < 0:
        raise ValueError(f"load must count tokens per expert (>= 0); got a minimum of {counts.min():g}")
    speed = check_finite("speed", speed, low=0.0)
    return b + speed * np.sign(counts.mean() - counts)


def router_z_loss(logits) -> tuple[float, np.ndarray]:
    """(L_z, dL_z/dlogits): the mean over tokens of logsumexp(logits_t)², and 2·lse_t·softmax(logits_t) / T."""
    x = _scores("logits", logits)
    top = x.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(x - top).sum(axis=1))                      # (T,), stable
    probs = np.exp(x - lse[:, None])
    return float(np.mean(lse**2)), 2 * lse[:, None] * probs / x.shape[0]
