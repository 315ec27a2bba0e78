"""A mixture-of-experts MLP for the capstone's blocks: a router, top-k experts with a capacity, forward and backward.

In place of a block's dense MLP (C → 4C → C), with the block's N = B·T tokens h (N, C) as one routing group::

    logits = h W_r                                            (N, n)   the router, no bias
    capacity = ⌈k · N / n · capacity_factor⌉                           (Switch eq. 3 with top-k; lesson 11)
    indices, kept = route_with_capacity(logits, k, capacity)  (N, k)   lesson 11, exercise 1
    combine = top_k_gate(logits, k, capacity)                 (N, n, capacity)   lesson 11, exercise 2
    y_t = Σ_e combine[t, e, :].sum() · E_e(h_t),  E_e(h) = GELU(h W1_e + b1_e) W2_e + b2_e

A dropped (token, expert) pair contributes nothing: the residual connection carries the token past the MLP. The
gate weight of a kept pair is softmax over the token's k chosen logits (normalised before capacity, GShard), so the
router learns through it; which experts are chosen and which pairs are kept are piecewise constant (no gradient).
With H = 4C / k, k experts of a token hold the dense MLP's 8C² weights: matched *active* parameters.

With ``aux_alpha`` = α > 0 the block adds α · aux_loss(logits, k) to the step's loss, Switch's load-balancing loss
(lesson 11, exercise 3: N · Σᵢ fᵢ Pᵢ, 1 at balance), and its gradient to the router's logits; α = 0 skips it.

**Routing groups** (GShard's G). With ``routing_groups`` = G > 1 the batch's B sequences are split as
``np.array_split`` splits them (the data-parallel shards of :func:`~mlsys_lab.capstone.text.shard_rows`) and each
group is routed on its own: its own capacity ⌈k · N_g / n · capacity_factor⌉, its own priority order, its own
auxiliary loss, weighted by its share of the tokens (α · Σ_g N_g/N · aux_g, so that the step's loss is the
token-weighted mean the data-parallel ranks average to). The experts still see the rows of every group. This is
the model that expert parallelism trains (:mod:`.ep`): there each rank routes its own shard, so G = p ranks on one
process is the same computation, and the two runs end at the same θ. G = 1 is the whole batch, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.moe.gating import assign_with_capacity, expert_capacity, top_k_experts
from mlsys_lab.validation import check_array, check_int, check_number, check_type


@dataclass(frozen=True)
class MoeConfig:
    """n experts, top-k routing, the capacity factor, the expert's hidden width (None: 4C / k, matched active
    parameters), α of Switch's auxiliary load-balancing loss (0: none; Switch uses 0.01), and the number of routing
    groups the batch's sequences are split into (1: the whole batch; p: what p expert-parallel ranks route)."""

    n_experts: int = 4
    top_k: int = 2
    capacity_factor: float = 1.25
    d_hidden: int | None = None
    aux_alpha: float = 0.0
    routing_groups: int = 1  # G: the batch's sequences routed in G groups, each with its own capacity

    def __post_init__(self) -> None:
        check_int("n_experts", self.n_experts, low=1, high=1024)
        check_int("top_k", self.top_k, low=1, high=self.n_experts)
        check_number("capacity_factor", self.capacity_factor, low=0.0, low_inclusive=False, high=64.0)
        if self.d_hidden is not None:
            check_int("d_hidden", self.d_hidden, low=1, high=1 << 16)
        check_number("aux_alpha", self.aux_alpha, low=0.0, high=1e6)
        check_int("routing_groups", self.routing_groups, low=1, high=1 << 16)

    def hidden(self, d_model: int) -> int:
        """An expert's hidden width at model width ``d_model``."""
        return self.d_hidden if self.d_hidden is not None else max(1, 4 * d_model // self.top_k)


def moe_layout(d_model: int, moe: MoeConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name within a block, shape) of the MoE MLP's parameters: the router, then every expert's two linears."""
    c = check_int("d_model", d_model, low=1, high=1 << 16)
    n, h = check_type("moe", moe, MoeConfig).n_experts, moe.hidden(c)
    return [("router.w", (c, n)), ("moe.fc.w", (n, c, h)), ("moe.fc.b", (n, h)), ("moe.out.w", (n, h, c)),
            ("moe.out.b", (n, c))]


def expert_params(d_model: int, moe: MoeConfig) -> dict[str, int]:
    """Numbers of one block's MoE MLP: all of them, the ones a token uses (k experts and the router), and the dense
    MLP's (C → 4C → C, biases included) for comparison."""
    c = check_int("d_model", d_model, low=1, high=1 << 16)
    one = 2 * c * check_type("moe", moe, MoeConfig).hidden(c) + moe.hidden(c) + c
    return {"total": moe.n_experts * one + c * moe.n_experts, "active": moe.top_k * one + c * moe.n_experts,
            "dense": 8 * c * c + 5 * c}


def capacity_routing(logits: np.ndarray, k: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (T, k) best first, kept (T, k) bool): first choices of every token before any second choice, each
    expert taking at most ``capacity`` (lesson 11's :func:`~mlsys_lab.moe.gating.top_k_experts` and
    :func:`~mlsys_lab.moe.gating.assign_with_capacity`)."""
    check_array("logits", logits, ndim=2, kinds="f")
    indices = top_k_experts(logits, k)
    kept, _ = assign_with_capacity(indices, logits.shape[1], check_int("capacity", capacity, low=0,
                                                                       high=indices.size))
    return indices, kept


def gate_combine(logits: np.ndarray, k: int, capacity: int) -> np.ndarray:
    """GShard's combine tensor (T, n, capacity): the gate weight of token t in slot c of expert e, zero elsewhere;
    gate weights are the softmax over the token's k best logits, a dropped pair loses its share."""
    check_array("logits", logits, ndim=2, kinds="f")
    indices = top_k_experts(logits, k)
    capacity = check_int("capacity", capacity, low=0, high=indices.size)  # past T·k slots, all would stay empty
    kept, slot = assign_with_capacity(indices, logits.shape[1], capacity)
    chosen = np.take_along_axis(logits, indices, axis=1)
    weights = np.exp(chosen - chosen[:, :1])
    weights /= weights.sum(axis=1, keepdims=True)
    combine = np.zeros((logits.shape[0], logits.shape[1], capacity), dtype=logits.dtype)
    t, j = np.nonzero(kept)
    combine[t, indices[t, j], slot[t, j]] = weights[t, j]
    return combine


def _route_group(logits: np.ndarray, moe: MoeConfig, route: Callable, gate: Callable, aux: Callable | None,
                 dtype) -> tuple:
    """One routing group's decisions from its router logits (N_g, n): (indices (N_g, k), kept (N_g, k) bool, gates
    (N_g, n) (0 where not kept), balance: None, or (α · aux loss, α · its gradient to the logits) when α > 0).
    The capacity is the group's own, at most N_g (an expert takes a token at most once). ``route``, ``gate`` and
    ``aux``: the lesson-11 pieces. What every MoE block runs, on one process and on each expert-parallel rank."""
    n_tokens = logits.shape[0]
    capacity = min(expert_capacity(n_tokens, moe.n_experts, moe.capacity_factor, moe.top_k), n_tokens)
    indices, kept = (np.asarray(a) for a in route(logits, moe.top_k, capacity))
    kept = kept.astype(bool)
    gates = np.asarray(gate(logits, moe.top_k, capacity), dtype=dtype).sum(axis=2)  # (N, n): 0 where not kept
    balance = None
    if moe.aux_alpha > 0:
        aux_loss, daux = aux(logits, moe.top_k)
        balance = (moe.aux_alpha * float(aux_loss), moe.aux_alpha * np.asarray(daux, dtype=dtype))
    return indices, kept, gates, balance


def _route_groups(logits: np.ndarray, moe: MoeConfig, route, gate, aux, dtype, n_rows: int) -> tuple:
    """:func:`_route_group` of each of the ``moe.routing_groups`` groups of the batch's ``n_rows`` sequences (their
    tokens contiguous in ``logits``), stacked; the balance term weighted by each group's share of the tokens."""
    if moe.routing_groups == 1:
        return _route_group(logits, moe, route, gate, aux, dtype)
    if not 1 <= moe.routing_groups <= n_rows:
        raise ValueError(f"moe.routing_groups must be at most the batch's {n_rows} sequences (a group is at least "
                         f"one sequence); got {moe.routing_groups}")
    per_row = logits.shape[0] // n_rows
    ends = np.cumsum([len(rows) * per_row for rows in np.array_split(np.arange(n_rows), moe.routing_groups)])
    parts = [_route_group(logits[end - size:end], moe, route, gate, aux, dtype)
             for end, size in zip(ends, np.diff(ends, prepend=0), strict=True)]
    indices, kept, gates = (np.concatenate([part[i] for part in parts]) for i in range(3))
    balance = None
    if moe.aux_alpha > 0:
        shares = np.diff(ends, prepend=0) / logits.shape[0]
        balance = (float(sum(s * part[3][0] for s, part in zip(shares, parts, strict=True))),
                   np.concatenate([s * part[3][1] for s, part in zip(shares, parts, strict=True)]).astype(dtype))
    return indices, kept, gates, balance


def _moe_forward(h: np.ndarray, w: dict, p: str, moe: MoeConfig, route: Callable, gate: Callable,
                 activation: Callable, aux: Callable | None = None, n_rows: int = 1):
    """y (N, C) of the MoE MLP of block ``p`` on tokens h (N, C) of ``n_rows`` sequences, and the cache of
    :func:`_moe_backward`. ``route``, ``gate`` and ``aux`` (run only when ``moe.aux_alpha`` > 0): the lesson-11
    pieces; ``activation(u)`` -> (GELU(u), GELU'(u)), the dense MLP's."""
    logits = h @ w[p + "router.w"]                                          # (N, n)
    indices, kept, gates, balance = _route_groups(logits, moe, route, gate, aux, h.dtype, n_rows)
    y = np.zeros_like(h)
    experts = []
    for e in range(moe.n_experts):
        rows = np.flatnonzero(((indices == e) & kept).any(axis=1))          # tokens kept by expert e
        x_e = h[rows]
        a, da_du = activation(x_e @ w[p + "moe.fc.w"][e] + w[p + "moe.fc.b"][e])
        y_e = a @ w[p + "moe.out.w"][e] + w[p + "moe.out.b"][e]
        y[rows] += gates[rows, e, None] * y_e
        experts.append((rows, x_e, a, da_du, y_e))
    return y, (h, logits, indices, kept, gates, experts, balance)


def _moe_aux(cache) -> float:
    """α · the auxiliary loss a :func:`_moe_forward` cache holds (0.0 without one)."""
    return 0.0 if cache[-1] is None else cache[-1][0]


def _moe_backward(dy: np.ndarray, cache, w: dict, grads: dict, p: str) -> np.ndarray:
    """dL/dh (N, C) of :func:`_moe_forward` from dy (N, C); fills the router's and the experts' gradients."""
    h, logits, indices, kept, gates, experts, balance = cache
    dh = np.zeros_like(h)
    dgates = np.zeros_like(gates)                                           # (N, n)
    for e, (rows, x_e, a, da_du, y_e) in enumerate(experts):
        dy_e = dy[rows]
        dgates[rows, e] = (dy_e * y_e).sum(axis=1)
        dout = gates[rows, e, None] * dy_e
        grads[p + "moe.out.w"][e] = a.T @ dout
        grads[p + "moe.out.b"][e] = dout.sum(axis=0)
        du = (dout @ w[p + "moe.out.w"][e].T) * da_du
        grads[p + "moe.fc.w"][e] = x_e.T @ du
        grads[p + "moe.fc.b"][e] = du.sum(axis=0)
        dh[rows] += du @ w[p + "moe.fc.w"][e].T
    return dh + _router_backward(dgates, h, logits, indices, kept, balance, w, grads, p)


def _router_backward(dgates: np.ndarray, h: np.ndarray, logits: np.ndarray, indices: np.ndarray,
                     kept: np.ndarray, balance, w: dict, grads: dict, p: str) -> np.ndarray:
    """The router's share of dL/dh (N, C) from dL/d gates (N, n); fills the router's gradient. The gate is
    g_tj = kept_tj · softmax_j(logits[t, indices[t]]): kept and indices carry no gradient, the softmax over the
    token's k logits does; ``balance`` (α · aux, α · its gradient) adds its gradient to the logits."""
    chosen = np.take_along_axis(logits, indices, axis=1)                    # (N, k)
    soft = np.exp(chosen - chosen.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    dsoft = np.take_along_axis(dgates, indices, axis=1) * kept
    dlogits = np.zeros_like(logits)
    np.put_along_axis(dlogits, indices, soft * (dsoft - (soft * dsoft).sum(axis=1, keepdims=True)), axis=1)
    if balance is not None:                                                 # + α · d aux / d logits
        dlogits += balance[1]
    grads[p + "router.w"][...] = h.T @ dlogits
    return dlogits @ w[p + "router.w"].T


def routing_stats(indices: np.ndarray, kept: np.ndarray, n_experts: int) -> tuple[float, np.ndarray]:
    """(the fraction of (token, expert) pairs dropped by capacity, each expert's share of the kept pairs)."""
    kept = check_array("kept", kept, ndim=2, kinds="b")
    if check_array("indices", indices, ndim=2, kinds="iu").shape != kept.shape:
        raise ValueError(f"kept must have the shape of indices {indices.shape}; got {kept.shape}")
    check_int("n_experts", n_experts, low=1, high=1024)
    load = np.bincount(indices[kept], minlength=n_experts)[:n_experts]
    return float(1.0 - kept.mean()), load / max(1, int(load.sum()))
