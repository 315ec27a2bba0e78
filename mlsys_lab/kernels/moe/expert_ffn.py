"""Four ways to run the expert FFNs of a MoE layer: a loop over experts, grouped GEMMs as a schedule of
cuBLAS calls, the same as one grouped-GEMM kernel launch, and one padded batched GEMM.

All compute, for T tokens routed to k experts each (x: (T, d), W1: (n, d, f), W2: (n, f, d); random inputs
come from :func:`mlsys_lab.moe.synthetic.random_routing`)::

    y_t = Σⱼ gate[t, j] · relu(x_t W1[e]) W2[e],   e = idx[t, j]

* :func:`moe_ffn_loop` is the per-expert loop many reference implementations use: for each expert,
  find its tokens (a device-to-host sync for the count), gather, two GEMMs, then scatter back one
  routing choice at a time (a boolean-mask gather, one more sync, per choice). That is tens of kernel
  launches and 1 + k syncs per expert, and each GEMM is small (the shrinking batch). A loop with a
  single index-add per expert (as in the Hugging Face Mixtral layer) syncs once per expert instead.
* :func:`moe_ffn_grouped` sorts the (token, choice) pairs by expert once (one sync, for the counts),
  gathers the tokens into one buffer in that order, so each expert's tokens are a contiguous segment,
  runs each expert's two GEMMs on exactly its segment (no padding, no further syncs: the launches queue
  up behind each other) and gathers each token's k results back. That is the schedule of a grouped
  GEMM; a grouped-GEMM kernel (CUTLASS, cuBLAS ``GemmGroupedBatched``, MegaBlocks' block-sparse GEMM,
  the fused-MoE kernels of vLLM and SGLang) runs the n segments as *one* launch as well.
* :func:`moe_ffn_grouped_kernel` is that: ``kernels/moe/grouped_gemm.cu`` takes a list of 64-row tiles
  (expert, first row, segment end) and runs every expert's segment with tensor cores in one launch per
  weight matrix. It wins where launches dominate (many small experts) and, being a plain kernel without
  software pipelining, loses to cuBLAS where the segments are big (lesson 11 has the H200 figures).
* :func:`moe_ffn_padded_batched` packs the pairs into a padded (n, C, d) buffer, C = the largest expert
  load, and runs one strided-batched GEMM per weight matrix. One launch, but it pays for padding when
  the load is uneven, and on CuPy 14 with fp16 on an H200 its batched matmul was measured 17x slower
  than the same work as 2-D GEMMs (lesson 11).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.backend import asnumpy, module_of
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_divisible, check_index_array, check_int


def _check_moe(x, idx, gate, w1, w2) -> None:
    """x (T, d), idx (T, k) expert ids, gate (T, k), w1 (n, d, f), w2 (n, f, d): each named when wrong."""
    x = check_array("x", x, ndim=2, kinds="f")
    w1 = check_array("w1", w1, ndim=3, kinds="f")
    if w1.shape[1] != x.shape[1]:
        raise ValueError(f"w1 must be (experts, d, f) with the d of x {x.shape}; got {w1.shape}")
    check_array("w2", w2, ndim=3, kinds="f", shape=(w1.shape[0], w1.shape[2], x.shape[1]))
    idx = check_array("idx", idx, ndim=2, kinds="iu", shape=(x.shape[0], None))
    if isinstance(idx, np.ndarray):  # a range check of device ids would sync the GPU inside timed launches
        check_index_array("idx", idx, w1.shape[0], of_name="the experts of w1")
    check_array("gate", gate, ndim=2, kinds="f", shape=tuple(idx.shape))


def moe_ffn_loop(x, idx, gate, w1, w2):
    """Reference: one pass per expert over the tokens routed to it. Returns (T, d)."""
    _check_moe(x, idx, gate, w1, w2)
    xp = module_of(x, idx, gate, w1, w2)
    out = xp.zeros_like(x)
    for e in range(w1.shape[0]):
        tok, choice = xp.nonzero(idx == e)                                  # sync: the count goes to the host
        if tok.size == 0:
            continue
        h = xp.maximum(x[tok] @ w1[e], 0)                                  # (t_e, f)
        y = (h @ w2[e]) * gate[tok, choice][:, None]                       # (t_e, d)
        for j in range(idx.shape[1]):  # scatter back one choice at a time (each a boolean-mask gather)
            sel = choice == j
            out[tok[sel]] += y[sel]
    return out


def expert_slots(idx, n_experts: int):
    """(slot (T, k): each pair's place in its expert's buffer, counts (n,)), by a stable sort on expert id."""
    check_int("n_experts", n_experts, low=1, high=1 << 20)
    check_array("idx", idx, ndim=2, kinds="iu")
    if isinstance(idx, np.ndarray):  # a range check of device ids would sync the GPU
        check_index_array("idx", idx, n_experts, of_name="n_experts")
    xp = module_of(idx)
    flat = idx.reshape(-1)
    order = xp.argsort(flat, kind="stable") if xp is np else xp.argsort(flat)
    counts = xp.bincount(flat, minlength=n_experts)
    starts = xp.cumsum(counts) - counts
    sorted_ids = flat[order]
    slot_sorted = xp.arange(flat.size) - starts[sorted_ids]
    slot = xp.empty_like(flat)
    slot[order] = slot_sorted
    return slot.reshape(idx.shape), counts


def _sorted_by_expert(x, idx, n_experts: int):
    """Gather the routed tokens in expert order: (xs (T·k, d), position (T, k) of each pair's row in xs,
    per-expert counts and starts as host lists). One device-to-host sync, for the counts."""
    xp = module_of(x, idx)
    n_tokens, k = idx.shape
    slot, counts = expert_slots(idx, n_experts)
    counts_host = np.asarray(asnumpy(counts)).tolist()                        # the one sync
    starts_host = np.concatenate([[0], np.cumsum(counts_host)[:-1]]).astype(int).tolist()
    position = xp.asarray(starts_host)[idx] + slot                          # (T, k): each pair's row
    xs = xp.empty((n_tokens * k, x.shape[1]), x.dtype)
    xs[position.reshape(-1)] = x[xp.repeat(xp.arange(n_tokens), k)]          # tokens in expert order
    return xs, position, counts_host, starts_host


def _combine(gate, ys, position):
    """y_t = Σⱼ gate[t, j] · ys[position[t, j]]: each token's k expert outputs, weighted (gathers, no atomics)."""
    out = gate[:, 0:1] * ys[position[:, 0]]
    for j in range(1, position.shape[1]):
        out = out + gate[:, j:j + 1] * ys[position[:, j]]
    return out


def moe_ffn_grouped(x, idx, gate, w1, w2):
    """Same result as :func:`moe_ffn_loop`: pairs sorted by expert once, one GEMM per expert on its
    contiguous segment (no padding), one sync in all."""
    _check_moe(x, idx, gate, w1, w2)
    xp = module_of(x, idx, gate, w1, w2)
    xs, position, counts_host, starts_host = _sorted_by_expert(x, idx, w1.shape[0])
    h = xp.empty((xs.shape[0], w1.shape[2]), x.dtype)
    ys = xp.empty_like(xs)
    segments = [(e, s, s + c) for e, (s, c) in enumerate(zip(starts_host, counts_host, strict=True)) if c]
    for e, start, stop in segments:
        xp.matmul(xs[start:stop], w1[e], out=h[start:stop])
    xp.maximum(h, 0, out=h)
    for e, start, stop in segments:
        xp.matmul(h[start:stop], w2[e], out=ys[start:stop])
    return _combine(gate, ys, position)


GROUPED_TILE_ROWS = 64  # BM in kernels/moe/grouped_gemm.cu


def grouped_gemm_tiles(counts, starts, tile_rows: int = GROUPED_TILE_ROWS) -> np.ndarray:
    """The grouped-GEMM kernel's work list: one (expert, first row, segment end) row per tile of
    ``tile_rows`` rows of each expert's segment; experts with no tokens get no tiles."""
    counts = check_array("counts", counts, ndim=1, kinds="iu", min_size=0)
    if check_array("starts", starts, ndim=1, kinds="iu", min_size=0).shape != counts.shape:
        raise ValueError(f"starts must have one entry per expert of counts {counts.shape}; got {np.shape(starts)}")
    check_int("tile_rows", tile_rows, low=1)
    if counts.size and (int(counts.min()) < 0 or int(np.asarray(starts).min()) < 0):
        raise ValueError("counts and starts must be >= 0")
    tiles = [(e, row, start + count) for e, (count, start) in enumerate(zip(counts, starts, strict=True))
             for row in range(start, start + count, tile_rows)]
    return np.asarray(tiles, dtype=np.int32).reshape(-1, 3)


def moe_ffn_grouped_kernel(x, idx, gate, w1, w2):
    """:func:`moe_ffn_grouped` with each weight's n GEMMs as *one* launch of a tensor-core grouped-GEMM
    kernel (``kernels/moe/grouped_gemm.cu``; fp16, d and d_ff multiples of 32). On NumPy arrays it is
    :func:`moe_ffn_grouped` (there are no launches to save)."""
    xp = module_of(x, idx, gate, w1, w2)
    if xp is np:
        return moe_ffn_grouped(x, idx, gate, w1, w2)
    d_model = check_divisible("d_model", w1.shape[1], 32)  # the kernel's 32-wide k tiles and 16-byte loads
    d_ff = check_divisible("d_ff", w1.shape[2], 32)
    if not all(a.dtype == xp.float16 for a in (x, w1, w2)):
        raise ValueError(f"x, w1 and w2 must be float16 for the grouped-GEMM kernel; got {x.dtype}, {w1.dtype}, "
                         f"{w2.dtype}")
    xs, position, counts_host, starts_host = _sorted_by_expert(x, idx, w1.shape[0])
    tiles = xp.asarray(grouped_gemm_tiles(counts_host, starts_host).T.copy())   # (3, n_tiles)
    kernel = loader.kernel("moe/grouped_gemm.cu", "grouped_gemm_f16")
    w1c, w2c = xp.ascontiguousarray(w1), xp.ascontiguousarray(w2)
    h = xp.empty((xs.shape[0], d_ff), x.dtype)
    ys = xp.empty_like(xs)
    n_tiles = tiles.shape[1]
    if n_tiles:
        for src, weight, dst, n_out, relu in ((xs, w1c, h, d_ff, 1), (h, w2c, ys, d_model, 0)):
            kernel((n_tiles, -(-n_out // 64)), (128,),
                   (src, weight, dst, tiles[0], tiles[1], tiles[2], np.int32(src.shape[1]), np.int32(n_out),
                    np.int32(relu)))
    return _combine(gate, ys, position)


def moe_ffn_padded_batched(x, idx, gate, w1, w2):
    """Same result as :func:`moe_ffn_loop` with one batched GEMM per weight over a padded (n, C, d) buffer."""
    _check_moe(x, idx, gate, w1, w2)
    xp = module_of(x, idx, gate, w1, w2)
    n_tokens, k = idx.shape
    n_experts = w1.shape[0]
    slot, counts = expert_slots(idx, n_experts)
    capacity = int(counts.max())                                           # the one sync
    buf = xp.zeros((n_experts, capacity, x.shape[1]), x.dtype)             # (n, C, d)
    tokens = xp.repeat(xp.arange(n_tokens), k)
    buf[idx.reshape(-1), slot.reshape(-1)] = x[tokens]
    h = xp.maximum(xp.matmul(buf, w1), 0)                                  # (n, C, f)
    y = xp.matmul(h, w2)                                                   # (n, C, d)
    out = gate[:, 0:1] * y[idx[:, 0], slot[:, 0]]
    for j in range(1, k):
        out = out + gate[:, j:j + 1] * y[idx[:, j], slot[:, j]]
    return out
