"""Checks for the exercises of 11_moe: top-k routing with expert capacity, and the load-balancing loss."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.moe.gating import assign_with_capacity, load_balancing_loss, top_k_experts


def reference_route(logits: np.ndarray, k: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (T, k) best first, kept (T, k)): first choices of all tokens before second choices.

    The lesson's own routing: :func:`mlsys_lab.moe.gating.top_k_experts` and
    :func:`mlsys_lab.moe.gating.assign_with_capacity` (the learner writes it as a loop).
    """
    indices = top_k_experts(logits, k)
    kept, _ = assign_with_capacity(indices, logits.shape[1], capacity)
    return indices, kept


def reference_aux_loss(router_probs: np.ndarray, expert_indices: np.ndarray) -> float:
    """N · Σᵢ fᵢ · Pᵢ: :func:`mlsys_lab.moe.gating.load_balancing_loss`."""
    return load_balancing_loss(np.asarray(router_probs), np.asarray(expert_indices))


def _as_routing(got) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        indices, kept = (np.asarray(v) for v in got)
    except (TypeError, ValueError):
        return None
    return indices, kept.astype(bool)


def _routing_problem(got, expected, n_experts: int, capacity: int) -> str | None:
    """The first difference from the reference, named precisely, or an over-full expert."""
    routing = _as_routing(got)
    if routing is None:
        return "return a pair (indices, kept)"
    indices, kept = routing
    for name, have, want in (("indices", indices, expected[0]), ("kept", kept, expected[1])):
        if have.shape != want.shape:
            return f"{name} has shape {have.shape}, expected {want.shape}"
        wrong = np.argwhere(have != want)
        if wrong.size:
            t, j = wrong[0]
            return f"{name}[{t}, {j}] = {have[t, j]}, expected {want[t, j]}"
    load = np.bincount(indices[kept], minlength=n_experts)
    return None if load.max(initial=0) <= capacity else f"an expert holds {load.max()} > capacity {capacity}"


def check_route_with_capacity(fn) -> None:
    """``fn(logits, k, capacity)`` -> (indices (T, k), kept (T, k) bool); no expert may exceed capacity."""
    g = rng()
    cases = []
    for i in range(10):
        n_tokens, n_experts = int(g.integers(4, 64)), int(g.integers(2, 12))
        k = int(g.integers(1, min(3, n_experts) + 1))
        capacity = int(g.integers(0 if i == 0 else 1, n_tokens * k // n_experts + 3))
        logits = g.normal(size=(n_tokens, n_experts)) + g.normal(size=n_experts)  # uneven experts
        expected = reference_route(logits, k, capacity)
        cases.append(Case(f"T={n_tokens}, n={n_experts}, k={k}, capacity={capacity}", (logits, k, capacity),
                          expected=expected,
                          check_result=lambda got, e=expected, n=n_experts, c=capacity:
                          _routing_problem(got, e, n, c)))
    # the comparison is done in check_result, which names the first wrong entry
    check("route_with_capacity", fn, cases, compare=lambda got, expected: True)


def check_aux_loss(fn) -> None:
    """``fn(router_probs, expert_indices)`` -> N · Σ fᵢ Pᵢ; 1 for uniform routing, N for total collapse."""
    n = 8
    uniform = np.full((16, n), 1 / n)
    collapsed = np.zeros((16, n))
    collapsed[:, 3] = 1.0
    cases = [Case("uniform probabilities, round-robin routing", (uniform, np.arange(16) % n), expected=1.0),
             Case("every token to expert 3 with probability 1", (collapsed, np.full(16, 3)),
                  expected=float(n))]
    g = rng()
    for _ in range(8):
        n_tokens, n_experts, k = int(g.integers(2, 100)), int(g.integers(2, 16)), int(g.integers(1, 3))
        logits = g.normal(size=(n_tokens, n_experts)) * g.uniform(0.1, 3)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        indices = np.argsort(-probs, axis=1)[:, :k]
        cases.append(Case(f"T={n_tokens}, n={n_experts}, k={k}", (probs, indices),
                          expected=reference_aux_loss(probs, indices)))
    check("aux_loss", fn, cases)
