"""When each parallelism becomes communication-bound: the per-axis thresholds of the JAX scaling book.

Austin et al. 2025, "How to Scale Your Model", part 5: with C the FLOP/s of a GPU and W the bandwidth of the
link the axis uses, an axis is compute-bound while the computation that can hide its communication takes
longer than the communication. Both sides are linear in the model's size, so the threshold is a ratio of
C to W times a constant that depends on the axis. Here the communication is lesson 07's α-β cost with α = 0
(:func:`mlsys_lab.collectives.cost.collective_time`, :func:`~mlsys_lab.collectives.cost.allreduce_time`) and
the computation is the 2·(parameters)·(tokens) FLOPs per pass of a dense layer (backward 2× forward):

* **data parallel (DDP)**: the gradient all-reduce (2Ψ bytes in bf16) hides under the backward (4Ψ FLOP per
  token): compute-bound for tokens per replica b > (N−1)/N · C/W;
* **FSDP / ZeRO-3**: two all-gathers and one reduce-scatter (3 × 2Ψ bytes) under forward and backward (6Ψ FLOP
  per token): the same threshold, b > (N−1)/N · C/W;
* **tensor parallel (Megatron)**: per layer and micro-batch of n tokens, 4 all-reduces of the activations
  (2·n·h bytes each) sit on the critical path beside 3 × 24·n·h²/t FLOPs: compute time exceeds communication
  time for h > 2(t−1)·C/(9W);
* **pipeline parallel**: per stage of L_s layers, a micro-batch's activations (2·n·h bytes) go to the next stage
  while it computes 24·n·h²·L_s: h·L_s > C/(12W), small enough to hold almost always.
"""

from __future__ import annotations

from mlsys_lab.collectives.cost import allreduce_time, collective_time
from mlsys_lab.validation import check_bool, check_int, check_positive

BYTES = 2  # bf16 weights, gradients and activations


def dp_critical_tokens(flop_per_s: float, link_bytes_per_s: float, n_ranks: int, sharded: bool = False) -> float:
    """Tokens per replica above which DP (``sharded``: FSDP) hides its gradient communication under compute.

    Evaluated at Ψ = 1 (both sides scale with Ψ): DDP all-reduce(2Ψ) = 4Ψ·b/C; FSDP 3·(all-gather 2Ψ) = 6Ψ·b/C.
    """
    c, beta = check_positive("flop_per_s", flop_per_s), 1 / check_positive("link_bytes_per_s", link_bytes_per_s)
    n = check_int("n_ranks", n_ranks, low=1)
    if check_bool("sharded", sharded):
        comm = 2 * collective_time("all_gather", BYTES, n, 0.0, beta) + collective_time("reduce_scatter", BYTES,
                                                                                      n, 0.0, beta)
        return float(comm * c / 6)
    return float(allreduce_time("ring", BYTES, n, 0.0, beta) * c / 4)


def tp_critical_hidden(flop_per_s: float, link_bytes_per_s: float, tp: int) -> float:
    """Model width h above which a Megatron layer's compute outlasts its 4 activation all-reduces.

    Per token: 4 · all-reduce(2h bytes over t) against 3 · 24h²/t FLOP; h* solves the equality.
    """
    c, beta = check_positive("flop_per_s", flop_per_s), 1 / check_positive("link_bytes_per_s", link_bytes_per_s)
    t = check_int("tp", tp, low=1)
    comm_per_h = 4 * allreduce_time("ring", BYTES, t, 0.0, beta)            # seconds per token per unit of h
    return float(comm_per_h * c * t / 72)                                     # 72h²/(tC) = comm_per_h·h


def pp_critical_width_layers(flop_per_s: float, link_bytes_per_s: float) -> float:
    """h·L_s above which a stage's forward (24·h²·L_s FLOP per token) outlasts its send (2h bytes per token)."""
    c, w = check_positive("flop_per_s", flop_per_s), check_positive("link_bytes_per_s", link_bytes_per_s)
    return float(BYTES / w * c / 24)
