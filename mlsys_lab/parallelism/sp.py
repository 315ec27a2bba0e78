"""Megatron sequence parallelism (SP): shard the non-tensor-parallel region along the sequence.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.2.2.
In plain TP the norms, residual adds (and dropout) run *replicated* on a full (b, s, d) tensor on
every rank, so their activations are not divided by t. SP keeps them split along the sequence,
(b, s/t, d) per rank, and swaps TP's collectives for their halves:

* ``g``  (entering a TP region): **all-gather** along s, backward **reduce-scatter**;
* ``ḡ``  (leaving it): **reduce-scatter** along s instead of all-reduce, backward **all-gather**.

Since all-reduce = reduce-scatter + all-gather, SP moves the same bytes as TP while storing the
norm/residual activations 1/t as large. The norm gains see only s/t tokens per rank, so their
gradients need one small all-reduce (d elements) per step.

(Ring attention / context parallelism, which splits the *attention* over sequence chunks for very
long contexts, is a different technique that the notes' "超长上下文" also points at.)
"""

from __future__ import annotations

from mlsys_lab.backend import xp
from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import (
    _check_blocks,
    attention,
    attention_backward,
    mlp,
    mlp_backward,
    rms_norm,
    rms_norm_backward,
)
from mlsys_lab.parallelism.tp import shard_block, unshard_grads
from mlsys_lab.validation import check_array, check_divides, check_int, check_sequence

SEQ_AXIS = 1


def sp_block_forward(xs: list, shards: list[dict], head_dim: int, log: comm.CommLog | None = None):
    """One block with TP + SP. xs: t × (b, s/t, d), rank r holding sequence chunk r."""
    check_int("head_dim", head_dim, low=1)
    _check_blocks("shards", shards)
    for x in check_sequence("xs", xs, min_size=len(shards), max_size=len(shards)):
        check_array("xs", x, ndim=3, kinds="f")
    t = len(shards)
    n1 = [rms_norm(xs[r], shards[r]["g1"]) for r in range(t)]                  # (b, s/t, d)
    u1 = comm.all_gather([u for u, _ in n1], axis=SEQ_AXIS, log=log)           # g: t × (b, s, d)
    att = [attention(u1[r], shards[r]["wq"], shards[r]["wk"], shards[r]["wv"], shards[r]["wo"], head_dim)
           for r in range(t)]
    a = comm.reduce_scatter([out for out, _ in att], axis=SEQ_AXIS, log=log)   # ḡ: t × (b, s/t, d)
    hs = [xs[r] + a[r] for r in range(t)]
    n2 = [rms_norm(hs[r], shards[r]["g2"]) for r in range(t)]
    u2 = comm.all_gather([u for u, _ in n2], axis=SEQ_AXIS, log=log)
    mlps = [mlp(u2[r], shards[r]["w1"], shards[r]["w2"]) for r in range(t)]
    m = comm.reduce_scatter([out for out, _ in mlps], axis=SEQ_AXIS, log=log)
    outs = [hs[r] + m[r] for r in range(t)]
    caches = [(n1[r][1], att[r][1], n2[r][1], mlps[r][1]) for r in range(t)]
    return outs, caches


def sp_block_backward(douts: list, caches: list, log: comm.CommLog | None = None):
    """Backward of :func:`sp_block_forward`. douts: t × (b, s/t, d). Returns (dxs, shard grads)."""
    caches = check_sequence("caches", caches, min_size=1)
    for cache in caches:
        if not isinstance(cache, tuple) or len(cache) != 4:
            raise TypeError(f"caches must hold one 4-tuple per rank (the forward's); got {type(cache).__name__}")
    check_sequence("douts", douts, min_size=len(caches), max_size=len(caches))
    t = len(caches)
    dm = comm.all_gather(douts, axis=SEQ_AXIS, log=log)                        # ḡ backward
    mb = [mlp_backward(dm[r], caches[r][3]) for r in range(t)]
    du2 = comm.reduce_scatter([du for du, _ in mb], axis=SEQ_AXIS, log=log)    # g backward
    n2b = [rms_norm_backward(du2[r], caches[r][2]) for r in range(t)]
    dhs = [douts[r] + n2b[r][0] for r in range(t)]
    da = comm.all_gather(dhs, axis=SEQ_AXIS, log=log)
    ab = [attention_backward(da[r], caches[r][1]) for r in range(t)]
    du1 = comm.reduce_scatter([du for du, _ in ab], axis=SEQ_AXIS, log=log)
    n1b = [rms_norm_backward(du1[r], caches[r][0]) for r in range(t)]
    dxs = [dhs[r] + n1b[r][0] for r in range(t)]
    # Each rank saw only its s/t tokens: the gains' gradients are partial sums.
    dg1 = comm.all_reduce([g for _, g in n1b], log)
    dg2 = comm.all_reduce([g for _, g in n2b], log)
    grads = [{"g1": dg1[r], "g2": dg2[r], **ab[r][1], **mb[r][1]} for r in range(t)]
    return dxs, grads


def sp_loss_and_grads(x, target, blocks: list[dict], n_heads: int, n_ranks: int,
                      log: comm.CommLog | None = None):
    """A TP+SP step's loss and full-shape gradients. x: (b, s, d), n_ranks must divide s."""
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    _check_blocks("blocks", blocks)
    check_divides("n_heads", n_heads, of_name="d_model", of_value=x.shape[-1])
    check_int("n_ranks", n_ranks, low=1)
    if x.shape[SEQ_AXIS] % n_ranks:
        raise ValueError(f"n_ranks must divide the sequence length {x.shape[SEQ_AXIS]}; got {n_ranks}")
    head_dim = x.shape[-1] // n_heads
    sharded = [shard_block(p, n_ranks, n_heads) for p in blocks]
    xs, caches = comm.partition(x, n_ranks, axis=SEQ_AXIS), []
    for shards in sharded:
        xs, cache = sp_block_forward(xs, shards, head_dim, log)
        caches.append(cache)
    y = xp.concatenate(xs, axis=SEQ_AXIS)          # only to evaluate the loss the same way
    loss, dy = mse_loss(y, target)
    dys, grads = comm.partition(dy, n_ranks, axis=SEQ_AXIS), []
    for cache in reversed(caches):
        dys, g = sp_block_backward(dys, cache, log)
        grads.append(unshard_grads(g))
    return loss, grads[::-1]
