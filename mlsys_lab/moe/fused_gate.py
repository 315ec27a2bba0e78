"""The router's gate as one fused pass versus the usual chain of array operations (Fused MoE Kernels).

For T tokens and n experts the gate turns router logits (T, n) into each token's top-k experts and their
weights: softmax over the n experts, keep the k largest, renormalize them to sum to 1. Written as array
operations (:func:`gate_unfused`) that is a chain of kernels, each reading and writing a (T, n) array:
max, subtract, exp, sum, divide, a partial sort that returns a full (T, n) index array, two gathers and a
second normalization. :func:`gate_fused` does it in one pass per token, holding the token's n logits in
registers (here: a numba loop over tokens), so the only traffic is the logits read once and the (T, k)
results written once: :func:`gate_bytes` counts both. That is the notes' point about fused MoE kernels:
the gate is many small steps, and as separate kernels each step is a round trip through memory.

Softmax then top-k then renormalize equals top-k of the logits then a softmax over just those k (the
normalizer cancels), which is what the fused pass computes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from mlsys_lab.validation import check_array, check_bool, check_int


def _check(logits: np.ndarray, k: int) -> int:
    if (array := check_array("logits", logits, kinds="f")).ndim != 2:  # dtype and shape: no pass over values
        raise ValueError(f"logits must be a 2-D (tokens, experts) array; got shape {array.shape}")
    return check_int("k", k, low=1, high=logits.shape[1])


def gate_unfused(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (T, k) best first, weights (T, k) summing to 1) by separate array operations."""
    k = _check(logits, k)
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    top = np.argpartition(-probs, k - 1, axis=1)[:, :k]                  # a full (T, n) index array first
    top_probs = np.take_along_axis(probs, top, axis=1)
    order = np.argsort(-top_probs, axis=1)
    indices = np.take_along_axis(top, order, axis=1)
    weights = np.take_along_axis(top_probs, order, axis=1)
    return indices, weights / weights.sum(axis=1, keepdims=True)


@njit(parallel=True, cache=True)
def _gate_fused(logits, k, indices, weights):
    n_tokens, n_experts = logits.shape
    for t in prange(n_tokens):
        # insertion into a k-long sorted list, best first: one read of the row
        for j in range(k):
            indices[t, j] = -1
        for e in range(n_experts):
            value = logits[t, e]
            j = k
            while j > 0 and (indices[t, j - 1] < 0 or value > logits[t, indices[t, j - 1]]):
                j -= 1
            if j < k:
                for m in range(k - 1, j, -1):
                    indices[t, m] = indices[t, m - 1]
                indices[t, j] = e
        best = logits[t, indices[t, 0]]
        total = 0.0
        for j in range(k):
            w = np.exp(logits[t, indices[t, j]] - best)
            weights[t, j] = w
            total += w
        for j in range(k):
            weights[t, j] /= total


def gate_fused(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Same result as :func:`gate_unfused` in one pass per token (top-k of the logits, softmax over k)."""
    k = _check(logits, k)
    logits = np.ascontiguousarray(logits)
    indices = np.empty((logits.shape[0], k), dtype=np.int64)
    weights = np.empty((logits.shape[0], k), dtype=logits.dtype)
    _gate_fused(logits, k, indices, weights)
    return indices, weights


def gate_bytes(n_tokens: int, n_experts: int, k: int, itemsize: int = 4, fused: bool = True) -> int:
    """Bytes moved through memory by the gate. Fused: read the logits once, write (T, k) indices (8 B) and
    weights. Unfused, counted step by step as :func:`gate_unfused` runs them (each (T, n) pass a read and,
    where it makes an array, a write): max (read), subtract (read + write), exp (read + write), sum (read),
    divide (read + write), argpartition (read + an 8-byte index array written), then small (T, k) steps."""
    check_int("n_tokens", n_tokens, low=0)
    check_int("n_experts", n_experts, low=1)
    check_int("k", k, low=1, high=n_experts)
    check_int("itemsize", itemsize, low=1, high=16)
    check_bool("fused", fused)
    full, small = n_tokens * n_experts * itemsize, n_tokens * k * (8 + itemsize)
    if fused:
        return full + small
    index_array = n_tokens * n_experts * 8
    return 8 * full + (full + index_array) + 4 * small
