"""The single-device reference: a small pre-norm transformer block with a hand-written backward.

Every parallel strategy in this package is checked against these functions. One block is

    h   = x + Attn(RMSNorm(x; g1))                                   x, h, out: (b, s, d)
    out = h + MLP(RMSNorm(h; g2)),   MLP(u) = GeLU(u W1) W2          W1: (d, f), W2: (f, d)

with causal multi-head attention ``Attn(u) = concat_heads(softmax(q kᵀ/√d_h + mask) v) Wo``,
``q = u Wq`` etc. (Vaswani et al. 2017), RMSNorm (Zhang & Sennrich 2019) and the tanh GeLU
(Hendrycks & Gimpel 2016). Biases are left out: Megatron adds a row-parallel layer's bias once,
after its all-reduce, which changes no communication. Parameters are a dict of arrays; a model is
a list of such dicts. Functions return ``(output, cache)`` and the matching ``*_backward`` takes
the cache, so sharded versions can call the very same code on their shards. Softmax, GeLU and the
loss ½·mean((y − target)²) are the course toolkit's (:mod:`mlsys_lab.nn`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.nn import gelu, gelu_grad, mse_loss, softmax
from mlsys_lab.validation import (
    check_array,
    check_divides,
    check_int,
    check_number,
    check_sequence,
    check_type,
    max_relative_error,
)

EPS = 1e-6
MAX_WIDTH = 4096  # widest model (d_model) the NumPy blocks accept; the MLP up to 4x that


def _check_blocks(name: str, blocks) -> list:
    """A model's blocks: a non-empty list of parameter dicts (TypeError/ValueError naming ``name``)."""
    for block in check_sequence(name, blocks, min_size=1):
        check_type(name, block, dict)
    return blocks


def _check_cache(cache, size: int, made_by: str) -> tuple:
    """A forward's cache: the ``size``-tuple ``made_by`` returned (TypeError naming ``cache``)."""
    if not isinstance(cache, tuple) or len(cache) != size:
        raise TypeError(f"cache must be the {size}-tuple {made_by} returns; got {type(cache).__name__} {cache!r:.40}")
    return cache


@dataclass(frozen=True)
class BlockConfig:
    """Sizes of one block: model width d, heads h (head size d/h) and MLP width f."""

    d_model: int = 16
    n_heads: int = 4
    d_ff: int = 64

    def __post_init__(self) -> None:
        # a NumPy model on a CPU: widths bounded so that a typo is refused here, not met as a MemoryError later
        check_int("d_model", self.d_model, low=1, high=MAX_WIDTH)
        check_divides("n_heads", self.n_heads, of_name="d_model", of_value=self.d_model)
        check_int("d_ff", self.d_ff, low=1, high=4 * MAX_WIDTH)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def init_block(cfg: BlockConfig, seed: int = 0) -> dict:
    """Random parameters of one block (float64 so that sharded and unsharded agree to ~1e-12)."""
    check_type("cfg", cfg, BlockConfig)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    d, f = cfg.d_model, cfg.d_ff

    def w(n_in, n_out):
        return xp.asarray(g.normal(0, 1 / math.sqrt(n_in), size=(n_in, n_out)))

    return {"g1": xp.asarray(1 + 0.1 * g.normal(size=d)), "wq": w(d, d), "wk": w(d, d), "wv": w(d, d),
            "wo": w(d, d), "g2": xp.asarray(1 + 0.1 * g.normal(size=d)), "w1": w(d, f), "w2": w(f, d)}


def init_model(cfg: BlockConfig, n_layers: int, seed: int = 0) -> list[dict]:
    """``n_layers`` blocks with different random parameters."""
    check_int("n_layers", n_layers, low=1, high=1024)
    check_type("cfg", cfg, BlockConfig)
    check_int("seed", seed, low=0)
    return [init_block(cfg, seed + 1000 * i) for i in range(n_layers)]


def n_params(blocks: list[dict]) -> int:
    """Number of parameters Ψ of a model (or one block in a list)."""
    _check_blocks("blocks", blocks)
    return int(sum(v.size for blk in blocks for v in blk.values()))


# --- RMSNorm ---------------------------------------------------------------------------------
def rms_norm(x, gain):
    """y = x / rms(x) · g, rms over the last axis. x: (..., d), g: (d,)."""
    fast = getattr(x, "ndim", 0) and getattr(gain, "ndim", 0) == 1 and x.size and x.dtype.kind == gain.dtype.kind == "f"
    shape = x.shape if fast else check_array("x", x, kinds="f").shape  # dtype and shape: no pass over the values
    if not shape or (gain.shape if fast else check_array("gain", gain, ndim=1, kinds="f").shape) != shape[-1:]:
        raise ValueError(f"x must be (..., d) and gain (d,), one gain per feature; got x {tuple(shape)}, "
                         f"gain {tuple(getattr(gain, 'shape', ()))}")
    inv_rms = 1.0 / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + EPS)  # (..., 1)
    return x * inv_rms * gain, (x, inv_rms, gain)


def rms_norm_backward(dy, cache):
    """Returns (dx, dgain); dgain is summed over every leading axis."""
    _check_cache(cache, 3, "rms_norm")
    check_array("dy", dy, kinds="f", finite=True, shape=tuple(getattr(cache[0], "shape", ())))
    x, inv_rms, gain = cache
    xhat = x * inv_rms                                                       # (..., d)
    dgain = (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0)                  # (d,)
    dxhat = dy * gain                                                        # (..., d)
    dx = inv_rms * (dxhat - xhat * xp.mean(dxhat * xhat, axis=-1, keepdims=True))
    return dx, dgain


# --- attention -------------------------------------------------------------------------------
def attention(u, wq, wk, wv, wo, head_dim: int):
    """Causal multi-head attention over the heads whose columns are in wq/wk/wv (rows of wo).

    u: (b, s, d); wq, wk, wv: (d, h_local·d_h); wo: (h_local·d_h, d) -> out: (b, s, d).
    With all heads this is the full layer; with a Megatron shard it is one rank's partial sum.
    """
    check_int("head_dim", head_dim, low=1)
    check_array("u", u, ndim=3, kinds="f")
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        check_array(name, w, ndim=2, kinds="f")
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv)):
        if w.shape[0] != u.shape[-1] or w.shape[1] != wq.shape[1]:
            raise ValueError(f"{name} must be (d, h·d_h) = ({u.shape[-1]}, {wq.shape[1]}) for u of shape {u.shape}; "
                             f"got {w.shape}")
    if wo.shape != (wq.shape[1], u.shape[-1]):
        raise ValueError(f"wo must be (h·d_h, d) = ({wq.shape[1]}, {u.shape[-1]}); got {wo.shape}")
    check_divides("head_dim", head_dim, of_name="the columns of wq", of_value=wq.shape[1])
    b, s, _ = u.shape
    n_local = wq.shape[1] // head_dim

    def heads(t):  # (b, s, h·d_h) -> (b, h, s, d_h)
        return t.reshape(b, s, n_local, head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads(u @ wq), heads(u @ wk), heads(u @ wv)                    # (b, h, s, d_h)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)              # (b, h, s, s)
    future = xp.triu(xp.ones((s, s), dtype=bool), k=1)                       # (s, s): key after query
    scores = xp.where(future, -xp.inf, scores)                               # causal mask
    probs = softmax(scores, axis=-1)                                         # (b, h, s, s)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, n_local * head_dim)  # (b, s, h·d_h)
    return ctx @ wo, (u, q, k, v, probs, ctx, wq, wk, wv, wo, head_dim)


def attention_backward(dout, cache):
    """Returns (du, {"wq", "wk", "wv", "wo"} gradients). dout: (b, s, d)."""
    _check_cache(cache, 11, "attention")
    check_array("dout", dout, ndim=3, kinds="f")
    u, q, k, v, probs, ctx, wq, wk, wv, wo, head_dim = cache
    b, s, _ = u.shape
    n_local = q.shape[1]

    def merge(t):  # (b, h, s, d_h) -> (b·s, h·d_h)
        return t.transpose(0, 2, 1, 3).reshape(b * s, n_local * head_dim)

    u2 = u.reshape(b * s, -1)
    dwo = ctx.reshape(b * s, -1).T @ dout.reshape(b * s, -1)                 # (h·d_h, d)
    dctx = (dout @ wo.T).reshape(b, s, n_local, head_dim).transpose(0, 2, 1, 3)  # (b, h, s, d_h)
    dprobs = dctx @ v.transpose(0, 1, 3, 2)                                   # (b, h, s, s)
    dv = probs.transpose(0, 1, 3, 2) @ dctx                                   # (b, h, s, d_h)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True)) / math.sqrt(head_dim)
    dq = dscores @ k                                                          # (b, h, s, d_h)
    dk = dscores.transpose(0, 1, 3, 2) @ q
    dq, dk, dv = merge(dq), merge(dk), merge(dv)                              # (b·s, h·d_h)
    du = (dq @ wq.T + dk @ wk.T + dv @ wv.T).reshape(u.shape)                 # (b, s, d)
    return du, {"wq": u2.T @ dq, "wk": u2.T @ dk, "wv": u2.T @ dv, "wo": dwo}


# --- MLP (GeLU and its derivative: mlsys_lab.nn) ---------------------------------------------
def mlp(u, w1, w2):
    """(GeLU(u W1) W2, cache): u: (b, s, d); W1: (d, f_local); W2: (f_local, d); the output is (b, s, d).

    Like every forward here it returns a pair: ``out, cache = mlp(u, w1, w2)``; the cache feeds :func:`mlp_backward`.
    """
    check_array("u", u, ndim=(2, 3), kinds="f")
    check_array("w1", w1, ndim=2, kinds="f")
    check_array("w2", w2, ndim=2, kinds="f")
    if w1.shape[0] != u.shape[-1]:
        raise ValueError(f"w1 must have {u.shape[-1]} rows (u has {u.shape[-1]} features); got shape {w1.shape}")
    if w2.shape[0] != w1.shape[1]:
        raise ValueError(f"w2 must have {w1.shape[1]} rows (w1 has {w1.shape[1]} columns); got shape {w2.shape}")
    pre = u @ w1                                                              # (b, s, f_local)
    act = gelu(pre)
    return act @ w2, (u, pre, act, w1, w2)


def mlp_backward(dout, cache):
    """Returns (du, {"w1", "w2"} gradients)."""
    _check_cache(cache, 5, "mlp")
    pre, w2 = cache[1], cache[4]
    check_array("dout", dout, ndim=(2, 3), kinds="f", shape=(*getattr(pre, "shape", (0,))[:-1],
                                                              getattr(w2, "shape", (0, 0))[-1]))
    u, pre, act, w1, w2 = cache
    d, f = w1.shape
    dw2 = act.reshape(-1, f).T @ dout.reshape(-1, w2.shape[1])               # (f_local, d)
    dpre = (dout @ w2.T) * gelu_grad(pre)                                     # (b, s, f_local)
    dw1 = u.reshape(-1, d).T @ dpre.reshape(-1, f)                            # (d, f_local)
    return dpre @ w1.T, {"w1": dw1, "w2": dw2}


# --- block, model, loss ----------------------------------------------------------------------
def block_forward(x, p: dict, head_dim: int):
    """One block on one device. x: (b, s, d) -> (b, s, d)."""
    check_array("x", x, ndim=3, kinds="f")  # (batch, seq, d_model)
    check_type("p", p, dict)
    check_int("head_dim", head_dim, low=1)
    u1, c_n1 = rms_norm(x, p["g1"])
    a, c_att = attention(u1, p["wq"], p["wk"], p["wv"], p["wo"], head_dim)
    h = x + a
    u2, c_n2 = rms_norm(h, p["g2"])
    m, c_mlp = mlp(u2, p["w1"], p["w2"])
    return h + m, (c_n1, c_att, c_n2, c_mlp)


def block_backward(dout, cache):
    """Returns (dx, grads with the same keys as the parameters)."""
    _check_cache(cache, 4, "block_forward")
    check_array("dout", dout, ndim=3, kinds="f")
    c_n1, c_att, c_n2, c_mlp = cache
    du2, g_mlp = mlp_backward(dout, c_mlp)
    dh_norm, dg2 = rms_norm_backward(du2, c_n2)
    dh = dout + dh_norm
    du1, g_att = attention_backward(dh, c_att)
    dx_norm, dg1 = rms_norm_backward(du1, c_n1)
    return dh + dx_norm, {"g1": dg1, "g2": dg2, **g_att, **g_mlp}


def model_forward(x, blocks: list[dict], head_dim: int):
    check_array("x", x, ndim=3, kinds="f")  # (batch, seq, d_model)
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    caches = []
    for p in blocks:
        x, cache = block_forward(x, p, head_dim)
        caches.append(cache)
    return x, caches


def model_backward(dy, caches):
    for cache in check_sequence("caches", caches, min_size=1):
        if not isinstance(cache, tuple) or len(cache) != 4:
            raise TypeError(f"caches must hold the 4-tuples block_forward returns; got {type(cache).__name__}")
    check_array("dy", dy, ndim=3, kinds="f")
    grads = []
    for cache in reversed(caches):
        dy, g = block_backward(dy, cache)
        grads.append(g)
    return dy, grads[::-1]


def loss_and_grads(x, target, blocks: list[dict], head_dim: int):
    """The single-device reference step: (loss, per-block gradient dicts)."""
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    y, caches = model_forward(x, blocks, head_dim)
    loss, dy = mse_loss(y, target)
    _, grads = model_backward(dy, caches)
    return loss, grads


def sgd_update(blocks: list[dict], grads: list[dict], lr: float) -> list[dict]:
    """θ ← θ − lr·g, returning new parameter dicts."""
    _check_blocks("blocks", blocks)
    _check_blocks("grads", grads)
    check_number("lr", lr, low=0.0, high=10.0)
    return [{k: p[k] - lr * g[k] for k in p} for p, g in zip(blocks, grads, strict=True)]


def max_relative_error_of_params(got: list[dict], ref: list[dict]) -> float:
    """max over the tensors of a model (list of parameter dicts) of max|got − ref| / max|ref|
    (:func:`mlsys_lab.validation.max_relative_error` per tensor): how far a parallel result is from the reference."""
    _check_blocks("got", got)
    _check_blocks("ref", ref)
    return max(max_relative_error(a[k], b[k]) for a, b in zip(got, ref, strict=True) for k in b)
