"""Expert parallelism (EP): a mixture-of-experts layer with experts partitioned over ranks.

GShard (Lepikhin et al. 2021) and Switch Transformer (Fedus et al. 2022). A router scores each
token against E experts; each token goes to its top-k experts and their outputs are mixed:

    logits = x W_r                       x: (n, d), W_r: (d, E)
    S      = top-k indices of logits      gates = softmax over the k chosen logits
    y      = Σ_{e ∈ S} gate_e · FFN_e(x)  FFN_e(u) = GeLU(u W1_e) W2_e

With ``p`` ranks, rank r holds experts [r·E/p, (r+1)·E/p) (*partitioning*) and n/p tokens. One
**all-to-all dispatch** sends each token to the ranks of its experts, each rank runs its experts,
and one **all-to-all combine** sends the results back. No capacity limit is applied here (no token
is dropped), so the result equals the single-device layer exactly; real systems cap each expert at
``capacity_factor · k·n/E`` tokens and the per-expert counts returned here show why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.moe.gating import top_k_gating
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import MAX_WIDTH, mlp
from mlsys_lab.validation import check_array, check_divides, check_int, check_type


@dataclass(frozen=True)
class MoEConfig:
    """Sizes of one MoE layer: model width, expert FFN width, experts, experts per token.

    (Lesson 11's trainable classifier has its own config, :class:`mlsys_lab.moe.train.MoEClassifierConfig`.)
    """

    d_model: int = 16
    d_ff: int = 32
    n_experts: int = 8
    top_k: int = 2

    def __post_init__(self) -> None:
        # a NumPy layer on a CPU: sizes bounded so that a typo is refused here, not met as a MemoryError later
        check_int("d_model", self.d_model, low=1, high=MAX_WIDTH)
        check_int("d_ff", self.d_ff, low=1, high=4 * MAX_WIDTH)
        check_int("n_experts", self.n_experts, low=1, high=1024)
        check_int("top_k", self.top_k, low=1, high=self.n_experts)


def init_moe(cfg: MoEConfig, seed: int = 0) -> dict:
    """Router (d, E) and per-expert W1 (E, d, f), W2 (E, f, d)."""
    if not isinstance(cfg, MoEConfig):
        raise TypeError(f"cfg must be a MoEConfig; got {type(cfg).__name__}")
    g = np.random.default_rng(check_int("seed", seed, low=0))
    d, f, e = cfg.d_model, cfg.d_ff, cfg.n_experts
    return {"router": xp.asarray(g.normal(0, 1 / math.sqrt(d), (d, e))),
            "w1": xp.asarray(g.normal(0, 1 / math.sqrt(d), (e, d, f))),
            "w2": xp.asarray(g.normal(0, 1 / math.sqrt(f), (e, f, d))), "top_k": cfg.top_k}


def _route(x, params: dict):
    """Top-k routing of :func:`mlsys_lab.moe.gating.top_k_gating`. x: (n, d) -> (expert ids (n, k), gates (n, k))."""
    return top_k_gating(x @ params["router"], params["top_k"])             # logits (n, E)


def moe_forward(x, params: dict):
    """Single-device MoE layer. x: (n, d) -> (n, d)."""
    check_type("params", params, dict)
    check_array("x", x, ndim=2, kinds="f")
    if "router" not in params or x.shape[1] != params["router"].shape[0]:
        raise ValueError(f"x must be (n, d) with the d of params['router']; got x {x.shape}")
    chosen, gates = _route(x, params)
    out = xp.zeros_like(x)
    for e in range(params["w1"].shape[0]):
        rows, slot = xp.nonzero(chosen == e)                                 # tokens routed to e
        if rows.size:
            y, _ = mlp(x[rows], params["w1"][e], params["w2"][e])           # (n_e, d)
            out[rows] += gates[rows, slot][:, None] * y
    return out


def ep_moe_forward(x, params: dict, n_ranks: int, log: comm.CommLog | None = None):
    """The same layer over ``n_ranks`` simulated ranks with all-to-all dispatch and combine.

    x: (n, d), n divisible by n_ranks. Returns (y (n, d), tokens_per_expert (E,) numpy array).
    """
    check_type("params", params, dict)
    check_array("x", x, ndim=2, kinds="f")
    if "router" not in params or x.shape[1] != params["router"].shape[0]:
        raise ValueError(f"x must be (n, d) with the d of params['router']; got x {x.shape}")
    n_experts = params["w1"].shape[0]
    check_divides("n_ranks", n_ranks, of_name="n_experts", of_value=n_experts)
    if x.shape[0] % n_ranks:
        raise ValueError(f"n_ranks must divide the number of tokens {x.shape[0]}; got {n_ranks}")
    per_rank = n_experts // n_ranks
    xs = comm.partition(x, n_ranks)                                         # p × (n/p, d)
    routing = [_route(xs[r], params) for r in range(n_ranks)]                 # local routers (replicated W_r)
    # Dispatch: rank i packs, for each destination j, the (token, slot) pairs whose expert lives on j.
    send_x, send_meta = [], []
    for i in range(n_ranks):
        chosen = routing[i][0]
        owner = chosen // per_rank                                          # (n/p, k) destination rank
        row_x, row_meta = [], []
        for j in range(n_ranks):
            rows, slot = xp.nonzero(owner == j)
            row_x.append(xs[i][rows])                                       # (n_ij, d)
            row_meta.append((rows, slot, chosen[rows, slot]))
        send_x.append(row_x)
        send_meta.append(row_meta)
    recv_x = comm.all_to_all(send_x, log)                                   # recv[j][i]: from i to j
    # Each rank runs its own experts on what it received.
    results = [[xp.zeros_like(recv_x[j][i]) for i in range(n_ranks)] for j in range(n_ranks)]
    for j in range(n_ranks):
        for i in range(n_ranks):
            experts = send_meta[i][j][2]
            for e in range(j * per_rank, (j + 1) * per_rank):
                sel = xp.nonzero(experts == e)[0]
                if sel.size:
                    results[j][i][sel], _ = mlp(recv_x[j][i][sel], params["w1"][e], params["w2"][e])
    back = comm.all_to_all(results, log)                                    # back[i][j]: j's answers to i
    outs = []
    for i in range(n_ranks):
        out = xp.zeros_like(xs[i])
        gates = routing[i][1]
        for j in range(n_ranks):
            rows, slot, _ = send_meta[i][j]
            for s in range(gates.shape[1]):  # within one slot a token appears once: plain += is safe
                sel = slot == s
                out[rows[sel]] += gates[rows[sel], s][:, None] * back[i][j][sel]
        outs.append(out)
    counts = np.bincount(np.concatenate([asnumpy(r[0]).ravel() for r in routing]), minlength=n_experts)
    return xp.concatenate(outs, axis=0), counts
