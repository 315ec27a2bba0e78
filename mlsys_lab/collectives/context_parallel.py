"""Context parallelism: ring attention over the simulated network (Liu, Zaharia & Abbeel 2023).

Each of p ranks holds one contiguous block of the sequence, its queries Q_r and its keys and values K_r, V_r
(about s/p rows each). Every query must meet every key, so the K/V blocks travel round the ring: in step t rank
r holds block j = (r − t) mod p, scores its queries against it and folds the result into running statistics
with the online-softmax rescaling (Milakov & Gimelshein 2018; the inner loop of FlashAttention). With m the
running row maximum, ℓ the running denominator and o the running unnormalised output of a query row,

    S = Q_r K_jᵀ / √d,   m' = max(m, rowmax S),   ℓ' = e^(m − m')·ℓ + rowsum e^(S − m'),
    o' = e^(m − m')·o + e^(S − m')·V_j,           and at the end O_r = o / ℓ.

While a rank computes on its block it sends that block on to rank r + 1 (one :meth:`Network.exchange` per
step, p − 1 in all), so the transfer hides behind the compute when one block's attention takes longer than
moving one K/V block: 4·b²·d·h FLOPs (QKᵀ and PV) at F FLOP/s against α + 2·b·d·h·e/B seconds (K and V,
e bytes per element) for b tokens per rank. The threshold (:func:`overlap_block_tokens`) solves
4dh·b²/F = α + 2dhe·b/B; at α = 0 it is b* = e·F/(2B), independent of d and h: with bf16 (e = 2) the
paper's "block size ≥ F/B" (§3). Causal attention skips the blocks j > r, so with contiguous blocks rank p − 1
computes p blocks and rank 0 one: real systems deal the sequence out in zig-zag order to balance it
(Llama 3's context parallelism; Brandon et al. 2023, "Striped Attention").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.collectives.network import Network
from mlsys_lab.validation import check_array, check_bool, check_finite, check_int, check_type


@dataclass
class RingAttentionResult:
    """The attention output, gathered in sequence order, and what the ring cost each rank."""

    output: np.ndarray  # (s, d)
    bytes_sent: np.ndarray  # int64 per rank: the K/V blocks it forwarded
    steps: int  # exchange rounds: p − 1
    blocks_computed: np.ndarray  # int per rank: blocks it scored (all p, or r + 1 when causal)

    def __post_init__(self) -> None:
        check_array("output", self.output, ndim=2, kinds="f", finite=True, min_size=0)
        check_int("steps", self.steps, low=0)
        for name in ("bytes_sent", "blocks_computed"):
            counts = check_array(name, getattr(self, name), ndim=1, kinds="iu", min_size=0)
            if counts.size and int(counts.min()) < 0:
                raise ValueError(f"{name} must hold counts >= 0; got {counts!r:.60}")


def _check_qkv(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v = (np.asarray(check_array(name, x, ndim=2, kinds="fiu", finite=True), dtype=np.float64)
               for name, x in (("q", q), ("k", k), ("v", v)))
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k and v must have one (seq, d) shape; got {q.shape}, {k.shape} and {v.shape}")
    return q, k, v


def full_attention(q, k, v, causal: bool = False) -> np.ndarray:
    """softmax(Q Kᵀ / √d + mask) V on one device, float64; q, k, v: (s, d) -> (s, d)."""
    q, k, v = _check_qkv(q, k, v)
    check_bool("causal", causal)
    s = q @ k.T / math.sqrt(q.shape[1])  # (s, s)
    if causal:
        s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True) @ v


def ring_attention(q, k, v, n_ranks: int, causal: bool = False, net: Network | None = None) -> RingAttentionResult:
    """Attention with the sequence split over ``n_ranks`` ranks and K/V blocks passed round a ring.

    q, k, v: (s, d), split into ``np.array_split`` blocks along s (any s; blocks may be empty). Every K/V
    block crosses ``net`` (a fresh :class:`Network` by default): rank r sends the block it holds to r + 1.
    """
    q, k, v = _check_qkv(q, k, v)
    p = check_int("n_ranks", n_ranks, low=1, high=4096)
    check_bool("causal", causal)
    net = Network(p) if net is None else check_type("net", net, Network)
    if net.n_ranks != p:
        raise ValueError(f"net must have n_ranks = {p} ranks; got {net.n_ranks}")
    seq, d = q.shape
    starts = np.cumsum([0] + [len(b) for b in np.array_split(np.arange(seq), p)])  # block j: [starts[j], starts[j+1])
    q_blocks = [q[starts[r]:starts[r + 1]] for r in range(p)]
    held = [np.stack([k[starts[r]:starts[r + 1]], v[starts[r]:starts[r + 1]]]) for r in range(p)]  # (2, b_r, d)
    m = [np.full(len(qb), -np.inf) for qb in q_blocks]  # running row max
    ell = [np.zeros(len(qb)) for qb in q_blocks]  # running denominator
    o = [np.zeros((len(qb), d)) for qb in q_blocks]  # running unnormalised output
    computed = np.zeros(p, dtype=np.int64)
    for step in range(p):
        for r in range(p):
            j = (r - step) % p  # the block rank r holds in this step
            if causal and j > r:  # every key of block j comes after every query of block r
                continue
            scores = q_blocks[r] @ held[r][0].T / math.sqrt(d)  # (b_r, b_j)
            if causal and j == r:
                scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
            if scores.size == 0:
                continue
            m_new = np.maximum(m[r], scores.max(axis=1))
            rescale = np.exp(np.where(np.isneginf(m[r]), -np.inf, m[r] - m_new))  # e^(m − m'), 0 before any key
            weights = np.exp(scores - m_new[:, None])
            ell[r] = rescale * ell[r] + weights.sum(axis=1)
            o[r] = rescale[:, None] * o[r] + weights @ held[r][1]
            m[r] = m_new
            computed[r] += 1
        if step < p - 1:  # the block goes on to the right neighbour while the next one is scored
            messages = [(r, (r + 1) % p, held[r]) for r in range(p)]
            received = net.exchange(messages)
            held = [received[(r - 1) % p] for r in range(p)]
    output = np.concatenate([o[r] / ell[r][:, None] for r in range(p)]) if seq else np.zeros((0, d))
    return RingAttentionResult(output, net.bytes_sent.copy(), net.steps, computed)


def ring_step_seconds(block_tokens, head_dim: int, n_heads: int, flop_per_s: float, bandwidth_bytes_per_s: float,
                      alpha: float = 0.0, bytes_per_element: int = 2):
    """(compute, transfer) seconds of one ring step for ``block_tokens`` (b) tokens per rank (scalar or array).

    compute = 4·b²·d·h / F (QKᵀ and PV of one block pair); transfer = α + 2·b·d·h·e / B (its K and V blocks).
    """
    b = np.asarray(check_array("block_tokens", block_tokens, kinds="fiu", finite=True, min_size=1), dtype=float)
    if np.any(b < 0):
        raise ValueError(f"block_tokens must be >= 0; got {block_tokens!r:.60}")
    d, h = check_int("head_dim", head_dim, low=1), check_int("n_heads", n_heads, low=1)
    flops = check_finite("flop_per_s", flop_per_s, low=0, low_inclusive=False)
    bandwidth = check_finite("bandwidth_bytes_per_s", bandwidth_bytes_per_s, low=0, low_inclusive=False)
    check_finite("alpha", alpha, low=0)
    e = check_int("bytes_per_element", bytes_per_element, low=1, high=16)
    compute, transfer = 4 * b**2 * d * h / flops, alpha + 2 * b * d * h * e / bandwidth
    return (compute, transfer) if b.ndim else (float(compute), float(transfer))


def overlap_block_tokens(flop_per_s: float, bandwidth_bytes_per_s: float, alpha: float = 0.0, head_dim: int = 128,
                         n_heads: int = 1, bytes_per_element: int = 2) -> float:
    """Tokens per rank above which a ring step's compute hides its transfer: the root of 4dh·b²/F = α + 2dhe·b/B.

    b* = (c + √(c² + 4aα)) / (2a) with a = 4dh/F, c = 2dhe/B; at α = 0, b* = e·F / (2B).
    """
    d, h = check_int("head_dim", head_dim, low=1), check_int("n_heads", n_heads, low=1)
    flops = check_finite("flop_per_s", flop_per_s, low=0, low_inclusive=False)
    bandwidth = check_finite("bandwidth_bytes_per_s", bandwidth_bytes_per_s, low=0, low_inclusive=False)
    alpha = check_finite("alpha", alpha, low=0)
    e = check_int("bytes_per_element", bytes_per_element, low=1, high=16)
    a, c = 4 * d * h / flops, 2 * d * h * e / bandwidth
    return float((c + math.sqrt(c * c + 4 * a * alpha)) / (2 * a))
