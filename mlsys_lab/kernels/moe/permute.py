"""The MoE token permutation on the GPU (``permute.cu``) and its NumPy references.

The router's decision is data: ``expert`` (T, k) and ``slot`` (T, k) int32, pair (t, j) sent to slot
``slot[t, j]`` of expert ``expert[t, j]``'s buffer, ``slot = -1`` for a pair dropped at capacity (the
convention of :func:`mlsys_lab.moe.gating.assign_with_capacity`). Then ::

    permute:   buffers[expert[t, j], slot[t, j]] = x[t]              buffers (n_experts, capacity, d), zeros elsewhere
    unpermute: out[t] = Σ_j weight[t, j] · y[expert[t, j], slot[t, j]]   over kept pairs; (T, d), zeros if none

are GShard's two einsums with the combine tensor (``einsum("tec,td->ecd", combine > 0, x)`` and
``einsum("tec,ecd->td", combine, y)``) without the (T, n, C) tensor: moving rows, no arithmetic beyond k
multiply-adds per output element, so memory-bound. The launchers take and return device arrays and raise
:class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU; the references are NumPy.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_int

THREADS = 256
BLOCKS_PER_SM = 32  # a grid-stride grid over rows: enough resident blocks to hide latency, independent of T
MAX_EXPERTS = 1 << 20
MAX_CAPACITY = 2**31 - 1  # the kernels take it as an int
SCATTERS = ("moe_scatter", "moe_scatter_thread_per_pair")
GATHERS = ("moe_gather", "moe_gather_atomic")


def _check_routing(expert, slot, rows, rows_name: str) -> tuple[int, int]:
    """expert and slot (T, k) integer arrays of the same shape, and ``rows`` (named ``rows_name``) with T rows:
    returns (T, k)."""
    check_array("expert", expert, ndim=2, kinds="iu", min_size=0)
    check_array("slot", slot, ndim=2, kinds="i", min_size=0, shape=tuple(expert.shape))
    if rows.shape[0] != expert.shape[0]:
        raise ValueError(f"{rows_name} must have one row per token of expert ({expert.shape[0]}); got shape "
                         f"{tuple(rows.shape)}")
    return int(expert.shape[0]), int(expert.shape[1])


def _check_ranges(expert: np.ndarray, slot: np.ndarray, n_experts: int, capacity: int) -> None:
    """On host arrays: experts in [0, n), slots in [-1, capacity), no two kept pairs in one slot."""
    kept = slot >= 0
    if expert.size and (int(expert.min()) < 0 or int(expert.max()) >= n_experts):
        raise ValueError(f"expert must lie in [0, {n_experts - 1}] for n_experts={n_experts}")
    if slot.size and (int(slot.min()) < -1 or int(slot.max()) >= capacity):
        raise ValueError(f"slot must lie in [-1, {capacity - 1}] for capacity={capacity} (-1: dropped)")
    rows = expert[kept].astype(np.int64) * max(capacity, 1) + slot[kept]
    if np.unique(rows).size != rows.size:
        raise ValueError("slot must give each kept pair a slot of its own within its expert")


def _grid(n_rows: int) -> int:
    return max(1, min(n_rows, BLOCKS_PER_SM * backend.sm_count()))


def _int32(a):
    return backend.xp.ascontiguousarray(a, dtype=backend.xp.int32)


def moe_permute(x, expert, slot, n_experts: int, capacity: int, kernel: str = "moe_scatter"):
    """Buffers (n_experts, capacity, d) float32 on the GPU: x's rows at their (expert, slot), zeros elsewhere.

    x (T, d) float32, expert and slot (T, k) int; ``kernel`` one of :data:`SCATTERS` (the second a slow lookalike).
    Traffic: the buffers written once (zeros, then the kept rows over them) and each kept row read."""
    loader.require_gpu("moe_permute")
    xp = backend.xp
    check_array("x", x, ndim=2, kinds="f", min_size=0)
    n_tokens, k = _check_routing(expert, slot, x, "x")
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    check_int("capacity", capacity, low=0, high=MAX_CAPACITY)
    if kernel not in SCATTERS:
        raise ValueError(f"kernel must be one of {SCATTERS}; got {kernel!r}")
    x = xp.ascontiguousarray(x, dtype=xp.float32)
    d = x.shape[1]
    buffers = xp.zeros((n_experts, capacity, d), dtype=xp.float32)
    if n_tokens * k == 0 or capacity == 0 or d == 0:
        return buffers
    blocks = _grid(n_tokens * k) if kernel == "moe_scatter" else _grid(loader.blocks_for(n_tokens * k, THREADS))
    loader.kernel("moe/permute.cu", kernel)(
        (blocks,), (THREADS,), (x, _int32(expert), _int32(slot), buffers, np.int32(n_tokens), np.int32(k),
                                np.int32(d), np.int32(capacity)))
    return buffers


def moe_unpermute(y, expert, slot, weight, kernel: str = "moe_gather"):
    """out (T, d) float32 on the GPU: out[t] = Σ_j weight[t, j] · y[expert[t, j], slot[t, j]] over kept pairs.

    y (n_experts, capacity, d) float32, expert and slot (T, k) int, weight (T, k) float; ``kernel`` one of
    :data:`GATHERS` (the second, a scatter-add with atomics, a slow lookalike)."""
    loader.require_gpu("moe_unpermute")
    xp = backend.xp
    check_array("y", y, ndim=3, kinds="f", min_size=0)
    check_array("weight", weight, ndim=2, kinds="f", min_size=0)
    n_tokens, k = _check_routing(expert, slot, weight, "weight")
    if tuple(weight.shape) != (n_tokens, k):
        raise ValueError(f"weight must have the shape of expert {(n_tokens, k)}; got {tuple(weight.shape)}")
    if kernel not in GATHERS:
        raise ValueError(f"kernel must be one of {GATHERS}; got {kernel!r}")
    y = xp.ascontiguousarray(y, dtype=xp.float32)
    n_experts, capacity, d = y.shape
    atomic = kernel == "moe_gather_atomic"
    out = (xp.zeros if atomic else xp.empty)((n_tokens, d), dtype=xp.float32)
    if n_tokens == 0 or d == 0:
        return out
    if k == 0 or capacity == 0:
        out[...] = 0
        return out
    blocks = _grid(n_tokens * k if atomic else n_tokens)
    loader.kernel("moe/permute.cu", kernel)(
        (blocks,), (THREADS,), (y, _int32(expert), _int32(slot), xp.ascontiguousarray(weight, dtype=xp.float32),
                                out, np.int32(n_tokens), np.int32(k), np.int32(d), np.int32(capacity)))
    return out


def moe_permute_reference(x, expert, slot, n_experts: int, capacity: int) -> np.ndarray:
    """NumPy reference of :func:`moe_permute`: (n_experts, capacity, d) float32, x's rows at their slots."""
    x = np.asarray(check_array("x", x, ndim=2, kinds="f", min_size=0))
    _check_routing(expert, slot, x, "x")
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    check_int("capacity", capacity, low=0, high=MAX_CAPACITY)
    expert, slot = np.asarray(expert), np.asarray(slot)
    _check_ranges(expert, slot, n_experts, capacity)
    buffers = np.zeros((n_experts, capacity, x.shape[1]), dtype=np.float32)
    t, j = np.nonzero(slot >= 0)
    buffers[expert[t, j], slot[t, j]] = x[t]
    return buffers


def moe_unpermute_reference(y, expert, slot, weight) -> np.ndarray:
    """NumPy float64 reference of :func:`moe_unpermute`, returned as float32 (T, d)."""
    y = np.asarray(check_array("y", y, ndim=3, kinds="f", min_size=0), dtype=np.float64)
    weight = np.asarray(check_array("weight", weight, ndim=2, kinds="f", min_size=0), dtype=np.float64)
    n_tokens, k = _check_routing(expert, slot, weight, "weight")
    if weight.shape != (n_tokens, k):
        raise ValueError(f"weight must have the shape of expert {(n_tokens, k)}; got {weight.shape}")
    expert, slot = np.asarray(expert), np.asarray(slot)
    _check_ranges(expert, slot, y.shape[0], y.shape[1])
    out = np.zeros((n_tokens, y.shape[2]))
    for j in range(k):  # the kernel's order: choice 0 first
        kept = slot[:, j] >= 0
        out[kept] += weight[kept, j, None] * y[expert[kept, j], slot[kept, j]]
    return out.astype(np.float32)


def moe_permute_bytes(slot, n_experts: int, capacity: int, d: int) -> int:
    """Bytes a permutation moves at least: the (n, C, d) float32 buffers written once, each token with a kept
    pair read once, and the two int32 routing arrays read."""
    slot = np.asarray(check_array("slot", slot, ndim=2, kinds="i", min_size=0))
    check_int("n_experts", n_experts, low=1, high=MAX_EXPERTS)
    check_int("capacity", capacity, low=0, high=MAX_CAPACITY)
    check_int("d", d, low=0)
    tokens_read = int((slot >= 0).any(axis=1).sum())
    return 4 * d * (n_experts * capacity + tokens_read) + 8 * slot.size


def moe_unpermute_bytes(slot, d: int) -> int:
    """Bytes an unpermutation moves at least: each kept pair's row read, the (T, d) float32 output written once,
    and the routing arrays and weights read (int32, int32, float32)."""
    slot = np.asarray(check_array("slot", slot, ndim=2, kinds="i", min_size=0))
    check_int("d", d, low=0)
    return 4 * d * (int((slot >= 0).sum()) + slot.shape[0]) + 12 * slot.size
