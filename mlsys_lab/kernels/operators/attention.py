"""Fused attention: softmax(q·kᵀ·scale [+ causal mask])·v in one kernel, the S×S scores never in memory.

The replacement that :func:`mlsys_lab.operators.passes.replace_attention` installs. GPU kernels live in
``mlsys_lab/kernels/operators/attention_rowwise.cu``; the CPU version is a numba loop compiled on first use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsys_lab import backend
from mlsys_lab.backend import xp
from mlsys_lab.validation import check_array, check_bool, check_positive

_CACHE: dict[str, Any] = {}

ATTENTION_CPU_SOURCE = '''
def attention_rows(q, k, v, out, scale, causal):
    """One query row at a time: its scores live in a length-S buffer, never in an S×S matrix."""
    bh, s_q, d = q.shape
    s_k = k.shape[1]
    scores = np.empty(s_k, dtype=np.float32)
    for b in range(bh):
        for i in range(s_q):
            j_end = min(s_k, i + 1 + s_k - s_q) if causal else s_k
            row_max = -np.inf
            for j in range(j_end):
                dot = np.float32(0.0)
                for t in range(d):
                    dot += q[b, i, t] * k[b, j, t]
                scores[j] = dot * scale
                row_max = max(row_max, scores[j])
            total = np.float32(0.0)
            for j in range(j_end):
                scores[j] = np.exp(scores[j] - row_max)
                total += scores[j]
            for t in range(d):
                out[b, i, t] = 0.0
            for j in range(j_end):
                p = scores[j] / total
                for t in range(d):
                    out[b, i, t] += p * v[b, j, t]
'''


def fused_attention(q: Any, k: Any, v: Any, scale: float, causal: bool = False) -> Any:
    """softmax(q·kᵀ·scale [+ causal mask])·v without materialising the S×S score matrix.

    Shapes: q [..., S_q, D], k and v [..., S_k, D] -> [..., S_q, D]. On the GPU a CUDA kernel with one warp
    per query row and an online softmax (Milakov & Gimelshein 2018; the inner loop of FlashAttention,
    Dao et al. 2022); on the CPU a numba loop with one row of scores at a time.
    """
    q = check_array("q", q, ndim=(2, 3, 4), kinds="f")
    k = check_array("k", k, kinds="f")
    if k.ndim != q.ndim or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must be [..., S_k, D] with the leading axes and D of q {q.shape}; got {k.shape}")
    check_array("v", v, ndim=q.ndim, kinds="f", shape=tuple(k.shape))
    check_positive("scale", scale)
    check_bool("causal", causal)
    lead, (s_q, d), s_k = q.shape[:-2], q.shape[-2:], k.shape[-2]
    bh = int(np.prod(lead, dtype=np.int64)) if lead else 1
    q3 = xp.ascontiguousarray(q.reshape(bh, s_q, d), dtype=xp.float32)
    k3 = xp.ascontiguousarray(k.reshape(bh, s_k, d), dtype=xp.float32)
    v3 = xp.ascontiguousarray(v.reshape(bh, s_k, d), dtype=xp.float32)
    out = xp.empty((bh, s_q, d), dtype=xp.float32)
    if backend.on_gpu:
        _attention_gpu(q3, k3, v3, out, scale, causal)
    else:
        _attention_cpu()(q3, k3, v3, out, np.float32(scale), bool(causal))
    return out.reshape(*lead, s_q, d)


def _attention_cpu():
    if "attention_cpu" not in _CACHE:
        import numba  # noqa: PLC0415

        namespace: dict[str, Any] = {"np": np}
        exec(compile(ATTENTION_CPU_SOURCE, "<attention_rows>", "exec"), namespace)  # noqa: S102
        _CACHE["attention_cpu"] = numba.njit(fastmath=True, cache=False)(namespace["attention_rows"])
    return _CACHE["attention_cpu"]


def _attention_gpu(q3, k3, v3, out, scale: float, causal: bool, tiled: bool = True) -> None:
    from mlsys_lab.kernels.loader import blocks_for, kernel  # noqa: PLC0415

    bh, s_q, d = q3.shape
    if d > 128:
        raise ValueError(f"head_dim must be <= 128 for the GPU attention kernel; got {d}")
    args = (
        q3,
        k3,
        v3,
        out,
        np.int32(bh),
        np.int32(s_q),
        np.int32(k3.shape[1]),
        np.int32(d),
        np.float32(scale),
        np.int32(bool(causal)),
    )
    if tiled:  # 8 query rows per block share K/V tiles in shared memory
        kernel("operators/attention_rowwise.cu", "attention_tiled")((blocks_for(s_q, 8), bh), (256,), args)
    else:  # one warp per query row, K and V read straight from global memory
        kernel("operators/attention_rowwise.cu", "attention_rowwise")((blocks_for(bh * s_q, 4),), (128,), args)
