"""The attention backward as FlashAttention-2 computes it (Dao 2023, Algorithm 2), in NumPy: the reference a fused
backward kernel is checked against, with its FLOP and byte counts.

The forward (:mod:`.flash_attention`) keeps only O and the log-sum-exp of each row, L = m + log(l) (natural log, of
the scaled scores; m the row max, l the row sum of exp(s − m)). The backward rebuilds P tile by tile from them:

    D = rowsum(dO ∘ O)                                   (B, H, S)      once, before the loop (Algorithm 2, line 4)
    for each K/V block j (Bc keys), for each Q block i (Br queries):
        S_ij  = Q_i K_jᵀ · scale                         (Br, Bc)
        P_ij  = exp(S_ij − L_i)                          the softmax, exact: L_i already holds the row's max and sum
        dV_j += P_ijᵀ dO_i                               (Bc, D)
        dP_ij = dO_i V_jᵀ                                (Br, Bc)
        dS_ij = P_ij ∘ (dP_ij − D_i)                     rowsum(dP ∘ P) = rowsum(dO ∘ O), so D replaces a pass over P
        dQ_i += dS_ij K_j · scale                        (Br, D)        the kernel adds it to HBM (atomics)
        dK_j += dS_ijᵀ Q_i · scale                       (Bc, D)

so no (S × S) matrix ever exists: each tile is Br × Bc. Causal masking (query r sees keys c ≤ r, one sequence for
queries and keys) skips the tiles above the diagonal and zeroes P above it inside the diagonal tiles; a last block
shorter than Br or Bc is handled as the kernel must handle it.

FLOPs as the FlashAttention papers count them: forward 4·B·H·S²·D (Q Kᵀ and P V), halved when causal; backward
2.5 × the forward (five S × S × D products: S again, dV, dP, dQ, dK; Dao 2023, §4.1). Bytes kept for the backward
beyond Q, K, V: a fused backward keeps O and L, B·H·S·(D·value_bytes + 4), O(S·D + S) per head; an unfused one keeps
P, B·H·S²·value_bytes, O(S²) per head (:func:`attention_backward_bytes`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from mlsys_lab.kernels.memory_hierarchy.flash_attention import attention_flop
from mlsys_lab.validation import check_array, check_bool, check_choice, check_finite, check_int, check_positive

LSE_BYTES = 4  # the log-sum-exp is kept in fp32, one value per query row


def _check_inputs(q, k, v, causal, scale, extra=()) -> tuple[np.dtype, float]:
    """q, k, v and each (name, array) of ``extra``: float arrays of one (B, H, S, D) shape; the computing dtype
    (float32 at least) and the softmax scale (1/sqrt(D) when None)."""
    shape = check_array("q", q, ndim=4, kinds="f", finite=True).shape
    for name, value in (("k", k), ("v", v), *extra):
        check_array(name, value, kinds="f", shape=shape, finite=True)
    check_bool("causal", causal)
    scale = 1 / math.sqrt(shape[-1]) if scale is None else check_positive("scale", scale)
    dtype = np.result_type(np.float32, *(x.dtype for x in (q, k, v, *(x for _, x in extra))))
    return dtype, scale


def attention_forward_lse(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                          scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, L) of softmax(Q Kᵀ · scale + mask) V, dense: O (B, H, S, D) and the log-sum-exp L (B, H, S) that the
    forward saves, L = m + log(sum exp(s − m)) over each row's scaled scores s. Float arrays (B, H, S, D); computed
    in their dtype (float32 at least); ``scale`` defaults to 1/sqrt(D)."""
    dtype, scale = _check_inputs(q, k, v, causal, scale)
    q, k, v = (np.asarray(x, dtype=dtype) for x in (q, k, v))
    seq = q.shape[2]
    s = (q @ k.swapaxes(-1, -2)) * dtype.type(scale)                      # (B, H, S, S)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), dtype=bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    row_sum = p.sum(axis=-1, keepdims=True)
    return (p / row_sum) @ v, (m + np.log(row_sum))[..., 0]


def attention_backward_dense(q, k, v, do, causal: bool = False, scale: float | None = None):
    """(dQ, dK, dV) by the textbook backward that materialises P (B, H, S, S): the answer the tiled one must give.

        dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),  dQ = dS K · scale,  dK = dSᵀ Q · scale
    """
    dtype, scale = _check_inputs(q, k, v, causal, scale, (("do", do),))
    q, k, v, do = (np.asarray(x, dtype=dtype) for x in (q, k, v, do))
    seq = q.shape[2]
    s = (q @ k.swapaxes(-1, -2)) * dtype.type(scale)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)                                    # (B, H, S, S)
    dp = do @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return (ds @ k) * dtype.type(scale), (ds.swapaxes(-1, -2) @ q) * dtype.type(scale), p.swapaxes(-1, -2) @ do


def attention_backward_tiled(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, do: np.ndarray,
                             lse: np.ndarray, causal: bool = False, block_rows: int = 128, block_cols: int = 64,
                             scale: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV), each (B, H, S, D), by FlashAttention-2's Algorithm 2 (the module's docstring), Br × Bc tiles.

    q, k, v, o, do: float (B, H, S, D); lse: (B, H, S), the forward's L (:func:`attention_forward_lse`). Outer loop
    over K/V blocks of ``block_cols`` keys, inner loop over Q blocks of ``block_rows`` queries (64 and 128, the
    forward kernel's tiles, swapped: the backward keeps K_j, V_j, dK_j, dV_j on chip). Computed in the inputs'
    dtype (float32 at least); batch and heads run together in each tile's products.
    """
    dtype, scale = _check_inputs(q, k, v, causal, scale, (("o", o), ("do", do)))
    batch, heads, seq, _ = q.shape
    check_array("lse", lse, kinds="f", shape=(batch, heads, seq), finite=True)
    br = check_int("block_rows", block_rows, low=1)
    bc = check_int("block_cols", block_cols, low=1)
    q, k, v, o, do = (np.asarray(x, dtype=dtype) for x in (q, k, v, o, do))
    lse = np.asarray(lse, dtype=dtype)[..., None]                          # (B, H, S, 1)
    scale = dtype.type(scale)
    d_rows = (do * o).sum(axis=-1, keepdims=True)                          # D = rowsum(dO ∘ O): (B, H, S, 1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for c0 in range(0, seq, bc):                                           # K_j, V_j: keys c0 .. c1 - 1
        c1 = min(c0 + bc, seq)
        k_j, v_j = k[:, :, c0:c1], v[:, :, c0:c1]                          # (B, H, Bc, D)
        for r0 in range(c0 // br * br if causal else 0, seq, br):          # causal: tiles above the diagonal skipped
            r1 = min(r0 + br, seq)
            s_ij = (q[:, :, r0:r1] @ k_j.swapaxes(-1, -2)) * scale         # (B, H, Br, Bc)
            if causal and c1 - 1 > r0:                                     # a tile that crosses the diagonal
                s_ij = np.where(np.arange(r0, r1)[:, None] >= np.arange(c0, c1)[None, :], s_ij, -np.inf)
            with np.errstate(over="ignore"):
                p_ij = np.exp(s_ij - lse[:, :, r0:r1])                     # masked entries: exp(−inf) = 0
            if not p_ij.max(initial=0.0) <= 1 + 1e-3:                      # L is a log-sum-exp: every P <= 1
                raise ValueError(f"lse must be the forward's log-sum-exp of these scores at this scale (each "
                                 f"exp(S·scale − L) <= 1); got exp(S·scale − L) up to {float(p_ij.max()):.3g}")
            do_i = do[:, :, r0:r1]                                         # (B, H, Br, D)
            dv[:, :, c0:c1] += p_ij.swapaxes(-1, -2) @ do_i
            dp_ij = do_i @ v_j.swapaxes(-1, -2)                            # (B, H, Br, Bc)
            ds_ij = p_ij * (dp_ij - d_rows[:, :, r0:r1])
            dq[:, :, r0:r1] += (ds_ij @ k_j) * scale
            dk[:, :, c0:c1] += (ds_ij.swapaxes(-1, -2) @ q[:, :, r0:r1]) * scale
    return dq, dk, dv


def attention_backward_flop(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """2.5 × :func:`~.flash_attention.attention_flop`: five S × S × D products (10·B·H·S²·D), half when causal.

    The FlashAttention papers' count (Dao 2023, §4.1): the recomputation of S is counted, the elementwise work
    (exp, dS) is not.
    """
    return 2.5 * attention_flop(batch, heads, seq, head_dim, causal)


@dataclasses.dataclass(frozen=True)
class AttentionBackwardBytes:
    """Bytes one attention layer keeps for its backward, beyond Q, K and V (which every backward reads)."""

    qkv: float  # Q, K, V: 3·B·H·S·D values, kept by both
    fused: float  # O and L: B·H·S·(D·value_bytes + 4), what a FlashAttention backward needs
    stored_p: float  # P: B·H·S²·value_bytes, what a backward that stores the probabilities needs

    def __post_init__(self) -> None:
        for name in ("qkv", "fused", "stored_p"):
            check_finite(name, getattr(self, name), low=0.0)

    @property
    def saved(self) -> float:
        """Bytes a fused backward saves against storing P."""
        return self.stored_p - self.fused

    @property
    def ratio(self) -> float:
        """stored_p / fused: S·value_bytes / (D·value_bytes + 4), about S / D."""
        return self.stored_p / self.fused


def attention_backward_bytes(batch: int, heads: int, seq: int, head_dim: int,
                             value_bytes: int = 2) -> AttentionBackwardBytes:
    """What one attention layer keeps for the backward, fused (O and the fp32 L) against storing P.

    Values are ``value_bytes`` wide (2: bf16/fp16, 4: fp32); L is fp32. P is counted whole (S² per head), causal or
    not: a dense kernel writes the full matrix, its upper triangle zeros.
    """
    for label, size in (("batch", batch), ("heads", heads), ("seq", seq), ("head_dim", head_dim)):
        check_int(label, size, low=1)
    check_choice("value_bytes", value_bytes, (2, 4))
    rows = float(batch) * heads * seq
    return AttentionBackwardBytes(qkv=3 * rows * head_dim * value_bytes,
                                  fused=rows * (head_dim * value_bytes + LSE_BYTES),
                                  stored_p=rows * seq * value_bytes)
