"""Checks for the exercises of 11_moe: routing with capacity, the top-k gate's combine tensor, the
load-balancing loss with its gradient, and expert-parallel dispatch over an all-to-all.

The expected answers are computed here in NumPy from the lesson's definitions; a rank group that stays on the
checking side records what the learner's dispatch sent, so the byte budget is never a number the learner reports.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.exercises.moe_cuda import (  # noqa: F401  (re-exported: the lesson's checks)
    check_moe_permute_cuda,
    check_moe_unpermute_cuda,
)
from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.moe.gating import assign_with_capacity, aux_loss_and_grad, top_k_experts
from mlsys_lab.parallelism import comm


def _logits(g: np.random.Generator, n_tokens: int, n_experts: int) -> np.ndarray:
    """Router logits with uneven experts (a per-expert offset), no ties."""
    return g.normal(size=(n_tokens, n_experts)) + g.normal(size=n_experts)


# ---------------------------------------------------------------- exercise 1: routing with capacity


def reference_route(logits: np.ndarray, k: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (T, k) best first, kept (T, k)): first choices of all tokens before second choices.

    The lesson's own routing: :func:`mlsys_lab.moe.gating.top_k_experts` and
    :func:`mlsys_lab.moe.gating.assign_with_capacity` (the learner writes it as a loop).
    """
    indices = top_k_experts(logits, k)
    kept, _ = assign_with_capacity(indices, logits.shape[1], capacity)
    return indices, kept


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


def _routing_shapes(g: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """(T, n, k, capacity): fixed boundaries (capacity 0, capacity ≥ T, k = n, one token), then random."""
    shapes = [(6, 3, 2, 2), (5, 4, 1, 0), (7, 3, 3, 7), (1, 5, 2, 1), (12, 2, 2, 5)]
    for _ in range(8):
        n_tokens, n_experts = int(g.integers(4, 64)), int(g.integers(2, 12))
        k = int(g.integers(1, min(3, n_experts) + 1))
        shapes.append((n_tokens, n_experts, k, int(g.integers(1, n_tokens * k // n_experts + 3))))
    return shapes


def check_route_with_capacity(fn) -> None:
    """``fn(logits, k, capacity)`` -> (indices (T, k), kept (T, k) bool); no expert may exceed capacity."""
    g = rng()
    cases = []
    for n_tokens, n_experts, k, capacity in _routing_shapes(g):
        logits = _logits(g, n_tokens, n_experts)
        expected = reference_route(logits, k, capacity)
        cases.append(Case(f"T={n_tokens}, n={n_experts}, k={k}, capacity={capacity}", (logits, k, capacity),
                          expected=expected,
                          check_result=lambda got, e=expected, n=n_experts, c=capacity:
                          _routing_problem(got, e, n, c)))
    # the comparison is done in check_result, which names the first wrong entry
    check("route_with_capacity", fn, cases, compare=lambda got, expected: True)


# ---------------------------------------------------------------- exercise 2: the gate's combine tensor


def reference_top_k_gate(logits: np.ndarray, k: int, capacity: int) -> np.ndarray:
    """GShard's combine tensor (T, n, C): the gate weight of token t in slot c of expert e, zero elsewhere.

    Gate weights are the softmax over the token's k best logits, normalised *before* capacity (a dropped pair
    loses its share, the kept ones are not renormalised: GShard Algorithm 1). Slots follow the priority order
    of :func:`reference_route`. The dispatch mask is ``combine > 0``.
    """
    indices = top_k_experts(logits, k)
    kept, slot = assign_with_capacity(indices, logits.shape[1], capacity)
    chosen = np.take_along_axis(logits, indices, axis=1)
    weights = np.exp(chosen - chosen[:, :1])
    weights /= weights.sum(axis=1, keepdims=True)
    combine = np.zeros((logits.shape[0], logits.shape[1], capacity))
    t, j = np.nonzero(kept)
    combine[t, indices[t, j], slot[t, j]] = weights[t, j]
    return combine


def _combine_problem(got, expected: np.ndarray) -> str | None:
    try:
        have = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return f"return a (T, n, capacity) float array; got {type(got).__name__}"
    if have.shape != expected.shape:
        return f"combine has shape {have.shape}, expected {expected.shape} (tokens, experts, capacity)"
    wrong = np.argwhere(~np.isclose(have, expected, rtol=1e-9, atol=1e-12))
    if wrong.size:
        t, e, c = wrong[0]
        return f"combine[{t}, {e}, {c}] = {have[t, e, c]:.6g}, expected {expected[t, e, c]:.6g}"
    return None


def check_top_k_gate(fn) -> None:
    """``fn(logits, k, capacity)`` -> combine (T, n, capacity) float: gate weights by expert and slot."""
    g = rng()
    cases = []
    for n_tokens, n_experts, k, capacity in _routing_shapes(g):
        logits = _logits(g, n_tokens, n_experts)
        expected = reference_top_k_gate(logits, k, capacity)
        cases.append(Case(f"T={n_tokens}, n={n_experts}, k={k}, capacity={capacity}", (logits, k, capacity),
                          expected=expected, check_result=lambda got, e=expected: _combine_problem(got, e)))
    check("top_k_gate", fn, cases, compare=lambda got, expected: True)


# ---------------------------------------------------------------- exercise 3: the balance loss and its gradient


def reference_aux_loss(router_logits: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """(N · Σᵢ fᵢ Pᵢ, its gradient with respect to the logits (T, N)): the library's
    :func:`~mlsys_lab.moe.gating.aux_loss_and_grad` (f counted over the T·k pairs, a constant in the gradient)."""
    return aux_loss_and_grad(router_logits, k)


def _loss_and_grad_problem(got, expected) -> str | None:
    """The first difference from (loss, gradient), named: the loss, or the first wrong gradient entry."""
    try:
        loss, grad = got
        grad = np.asarray(grad, dtype=float)
        loss = float(loss)
    except (TypeError, ValueError):
        return f"return a pair (loss, gradient array); got {type(got).__name__}"
    if not np.isclose(loss, expected[0], rtol=1e-7, atol=1e-12):
        return f"loss {loss:.6g}, expected {expected[0]:.6g}"
    if grad.shape != expected[1].shape:
        return f"gradient has shape {grad.shape}, expected {expected[1].shape} (tokens, experts)"
    wrong = np.argwhere(~np.isclose(grad, expected[1], rtol=1e-6, atol=1e-12))
    if wrong.size:
        t, i = wrong[0]
        return f"gradient[{t}, {i}] = {grad[t, i]:.6g}, expected {expected[1][t, i]:.6g}"
    return None


def check_aux_loss(fn) -> None:
    """``fn(router_logits, k)`` -> (loss, d loss / d router_logits (T, N)); the loss is 1 at balance."""
    example = np.array([[2.0, 0.0], [1.0, 0.0]])
    balanced = np.array([[1.0, 0.0, -1.0], [-1.0, 1.0, 0.0], [0.0, -1.0, 1.0]])
    cases = [Case("Example: both tokens to expert 0", (example, 1), expected=reference_aux_loss(example, 1)),
             Case("balanced, k=1 (loss 1, gradient 0)", (balanced, 1), expected=reference_aux_loss(balanced, 1)),
             Case("balanced routing, k=2", (balanced, 2), expected=reference_aux_loss(balanced, 2)),
             Case("one token, k=n", (np.array([[0.3, -1.2, 2.0, 0.1]]), 4),
                  expected=reference_aux_loss(np.array([[0.3, -1.2, 2.0, 0.1]]), 4))]
    g = rng()
    huge = 800.0 + _logits(g, 6, 4) * 30                                          # exp() of these overflows
    cases.append(Case("logits near 800 (a softmax must subtract the max)", (huge, 2),
                      expected=reference_aux_loss(huge, 2)))
    for _ in range(7):
        n_tokens, n_experts = int(g.integers(2, 80)), int(g.integers(2, 16))
        k = int(g.integers(1, min(3, n_experts) + 1))
        logits = _logits(g, n_tokens, n_experts) * g.uniform(0.3, 3)
        cases.append(Case(f"T={n_tokens}, N={n_experts}, k={k}", (logits, k), expected=reference_aux_loss(logits, k)))
    for case in cases:
        case.check_result = lambda got, e=case.expected: _loss_and_grad_problem(got, e)
    check("aux_loss", fn, cases, compare=lambda got, expected: True)


# ---------------------------------------------------------------- exercise 4: expert-parallel dispatch


class AllToAllGroup:
    """Simulated ranks with one collective, ``all_to_all(send)``: ``send[i][j]`` goes from rank i to rank j.

    Each call is recorded (on the checking side) with the rows every rank sent to each other rank.
    """

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"all_to_all", "n_ranks"})

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = n_ranks
        self.sent_rows: list[np.ndarray] = []                                # per call, (p, p) rows i -> j
        self.log = comm.CommLog()

    def all_to_all(self, send) -> list[list]:
        pieces = [[np.asarray(piece, dtype=float) for piece in row] for row in send]
        rows = np.array([[piece.shape[0] if piece.ndim else 1 for piece in row] for row in pieces])
        self.sent_rows.append(rows)
        return comm.all_to_all(pieces, self.log)


def reference_ep_dispatch(tokens: list, experts: list, n_experts: int, n_ranks: int, group) -> list:
    """Rank j's received tokens, grouped by its local experts: ``out[j][e]`` = rows for global expert
    j·E/p + e, in order of source rank, then of token. Each rank sends one all-to-all: the lesson's own
    :func:`mlsys_lab.moe.dispatch.expert_dispatch` (the capstone runs it on real MPI ranks)."""
    return expert_dispatch(tokens, experts, n_experts, n_ranks, group)


def _dispatch_problem(got, expected: list, group: AllToAllGroup, experts: list, per: int) -> str | None:
    if len(group.sent_rows) != 1:
        return f"made {len(group.sent_rows)} all_to_all calls; the budget is one"
    p = group.n_ranks
    owner = [np.asarray(e) // per for e in experts]
    due = np.array([[int(np.sum(owner[i] == j)) for j in range(p)] for i in range(p)])
    sent = group.sent_rows[0]
    if sent.shape != due.shape or np.any(sent != due):
        bad = np.argwhere(sent != due)[0] if sent.shape == due.shape else (0, 0)
        return (f"rank {bad[0]} sent rank {bad[1]} {sent[tuple(bad)] if sent.shape == due.shape else '?'} rows; "
                f"exactly its {due[tuple(bad)]} tokens for that rank's experts are due")
    try:
        if len(got) != p or any(len(got[j]) != per for j in range(p)):
            return f"return p = {p} lists of E/p = {per} arrays"
        for j in range(p):
            for e in range(per):
                have = np.asarray(got[j][e], dtype=float)
                want = expected[j][e]
                if have.shape != want.shape or not np.array_equal(have, want):
                    rows = have.shape[0] if have.ndim else 0
                    return (f"rank {j}, local expert {e} (global {j * per + e}) got {rows} rows, expected "
                            f"{want.shape[0]} (or in another order: by source rank, then token)")
    except TypeError:
        return "return a list (per rank) of lists (per local expert) of (rows, d) arrays"
    return None


def check_ep_dispatch(fn) -> None:
    """``fn(tokens, experts, n_experts, n_ranks, group)`` -> per rank, per local expert, the (rows, d) tokens it runs.

    ``tokens[i]`` (n_i, d) and ``experts[i]`` (n_i,) are rank i's tokens and their chosen experts; rank j
    holds experts j·E/p … (j+1)·E/p − 1. Budget, recorded by the group: one ``all_to_all`` in which rank i
    sends rank j exactly its tokens for j's experts (nothing replicated, nothing broadcast).
    """
    g = rng()
    shapes = [(2, 4, [3, 2]), (1, 2, [4]), (4, 4, [0, 3, 1, 5]), (2, 2, [6, 6])]
    for _ in range(6):
        p = int(g.choice([2, 3, 4]))
        shapes.append((p, p * int(g.integers(1, 4)), [int(n) for n in g.integers(0, 9, size=p)]))
    cases = []
    for p, n_experts, counts in shapes:
        d = int(g.integers(1, 5))
        tokens = [np.round(g.normal(size=(n, d)), 3) + 10 * i for i, n in enumerate(counts)]
        experts = [g.integers(0, n_experts, size=n) for n in counts]
        if p == 2 and n_experts == 2 and counts == [6, 6]:
            experts = [np.zeros(6, dtype=int), np.zeros(6, dtype=int)]            # every token to rank 0
        expected = reference_ep_dispatch(tokens, experts, n_experts, p, AllToAllGroup(p))
        group = AllToAllGroup(p)
        cases.append(Case(f"p={p}, E={n_experts}, tokens per rank {counts}", (tokens, experts, n_experts, p, group),
                          expected=expected,
                          check_result=lambda got, e=expected, group=group, experts=experts, per=n_experts // p:
                          _dispatch_problem(got, e, group, experts, per)))
    check("ep_dispatch", fn, cases, compare=lambda got, expected: True)
