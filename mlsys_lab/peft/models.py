"""A one-block transformer classifier with four ways to fine-tune it, forward and backward by hand.

Model (B sequences of T tokens, width d, MLP width h, c classes)::

    x0 = emb[tokens] + pos                       (B, T, d)
    q, k, v = x0 Wq, x0 Wk, x0 Wv                (B, T, d)   LoRA may add s·(x A) B to any of them
    K, V = [prefix_k; k], [prefix_v; v]          (B, L+T, d) prefix tuning: L trainable rows
    o = softmax(q Kᵀ / √d) V                     (B, T, d)
    x1 = x0 + o Wo                               attention block with residual
    x2 = x1 + relu(x1 W1 + b1) W2 + b2           MLP block with residual
    x3 = x2 + relu(x2 Ad + ad_b) Au + au_b       adapter (Houlsby-style bottleneck r, residual)
    logits = mean_t(x3) H + h_b                  (B, c)

The methods differ only in which parameters exist and which are trained:

* ``full``: every base parameter; ``head``: the classifier only (the floor to beat);
* ``adapter``: Ad, Au (up-projection zero, so it starts as the identity);
* ``prefix``: prefix_k, prefix_v;
* ``lora``: A (random) and B (zero) for each adapted projection, so the start equals the base.

The three parameter-efficient methods also train the classifier head, as the papers do on GLUE
(Houlsby et al. 2019, Section 3; Hu et al. 2021, Section 5): the head is task-specific.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.nn import Params, init_normal, softmax
from mlsys_lab.validation import (
    check_array,
    check_choice,
    check_finite,
    check_index_array,
    check_int,
    check_names,
    check_sequence,
    check_type,
)

METHODS = ("full", "head", "adapter", "prefix", "lora")
PROJECTIONS = ("q", "k", "v", "o")
HEAD = ("head", "head_b")


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the tiny transformer."""

    vocab: int = 16
    seq_len: int = 12
    d_model: int = 32
    d_hidden: int = 64
    n_classes: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab", "seq_len", "d_model", "d_hidden", "n_classes"):  # a tiny model: bounds keep it so
            check_int(name, getattr(self, name), low=1, high=4096)


DEFAULT_CONFIG = TinyConfig()

def _check_params(name: str, params) -> None:
    """The tiny classifier's parameters: a dict with at least the base's arrays (TypeError/ValueError naming it)."""
    check_type(name, params, dict)
    missing = [key for key in ("emb", "pos", "wq", "head", "head_b") if key not in params]
    if missing:
        raise ValueError(f"{name} must hold the classifier's parameters (init_base); {missing} missing")


def init_base(config: TinyConfig, seed: int = 0) -> Params:
    """Random base parameters (what pre-training starts from)."""
    check_type("config", config, TinyConfig)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    d, h = config.d_model, config.d_hidden
    p = {"emb": init_normal(rng, (config.vocab, d), 1.0),
         "pos": init_normal(rng, (config.seq_len, d), 1.0)}
    for name in PROJECTIONS:
        p["w" + name] = init_normal(rng, (d, d), 1 / math.sqrt(d))
    p.update({"w1": init_normal(rng, (d, h), 1 / math.sqrt(d)), "b1": xp.zeros(h, xp.float32),
              "w2": init_normal(rng, (h, d), 1 / math.sqrt(h)), "b2": xp.zeros(d, xp.float32),
              "head": init_normal(rng, (d, config.n_classes), 1 / math.sqrt(d)),
              "head_b": xp.zeros(config.n_classes, xp.float32)})
    return p


def add_method(base: Params, method: str, rank: int = 4, prefix_len: int = 4,
               lora_targets: tuple[str, ...] = ("q", "v"), seed: int = 1) -> tuple[Params, tuple[str, ...]]:
    """Copy ``base``, add the method's new parameters; return (params, names of trainable parameters)."""
    _check_params("base", base)
    check_int("seed", seed, low=0)
    for target in check_sequence("lora_targets", lora_targets, min_size=1):
        check_choice("lora_targets", target, PROJECTIONS)
    check_choice("method", method, METHODS)
    d = base["wq"].shape[0]
    check_int("rank", rank, low=1, high=d)
    check_int("prefix_len", prefix_len, low=1)
    for t in lora_targets:
        check_choice("lora_targets", t, PROJECTIONS)
    rng = np.random.default_rng(seed)
    p = {name: value.copy() for name, value in base.items()}
    if method == "full":
        return p, tuple(base)
    if method == "head":
        return p, HEAD
    if method == "adapter":
        p.update({"ad_down": init_normal(rng, (d, rank), 1 / math.sqrt(d)),
                  "ad_down_b": xp.zeros(rank, xp.float32),
                  "ad_up": xp.zeros((rank, d), xp.float32), "ad_up_b": xp.zeros(d, xp.float32)})
        return p, ("ad_down", "ad_down_b", "ad_up", "ad_up_b") + HEAD
    if method == "prefix":
        p.update({"prefix_k": init_normal(rng, (prefix_len, d), 1.0),
                  "prefix_v": init_normal(rng, (prefix_len, d), 0.1)})
        return p, ("prefix_k", "prefix_v") + HEAD
    names = []
    for t in lora_targets:
        p[f"lora_a_{t}"] = init_normal(rng, (d, rank), 1 / math.sqrt(d))  # A: random Gaussian
        p[f"lora_b_{t}"] = xp.zeros((rank, d), xp.float32)                # B: zero, so ΔW = 0 at start
        names += [f"lora_a_{t}", f"lora_b_{t}"]
    return p, tuple(names) + HEAD


def merge_lora(params: Params, scale: float = 1.0) -> Params:
    """W ← W + s·A·B for every adapted projection, LoRA factors removed: one plain matrix per projection."""
    _check_params("params", params)
    check_finite("scale", scale)
    merged = {k: v.copy() for k, v in params.items() if not k.startswith("lora_")}
    for t in PROJECTIONS:
        if f"lora_a_{t}" in params:
            merged["w" + t] = merged["w" + t] + scale * (params[f"lora_a_{t}"] @ params[f"lora_b_{t}"])
    return merged


def _proj(params: Params, t: str, x2d, scale: float, cache: dict):
    """y = x W + s·(x A) B, caching x A for the backward pass."""
    y = x2d @ params["w" + t]
    if f"lora_a_{t}" in params:
        xa = x2d @ params[f"lora_a_{t}"]
        cache["xa_" + t] = xa
        y = y + scale * (xa @ params[f"lora_b_{t}"])
    return y


def forward(params: Params, tokens, lora_scale: float = 1.0) -> tuple[object, dict]:
    """Logits (B, c) and the cache the backward pass needs. ``tokens``: int array (B, T)."""
    _check_params("params", params)
    if isinstance(tokens, np.ndarray):  # a range check of device tokens would sync the GPU every step
        check_index_array("tokens", tokens, params["emb"].shape[0], of_name="vocab")
    else:
        check_array("tokens", tokens, kinds="iu")
    if getattr(tokens, "ndim", 0) != 2 or not 1 <= tokens.shape[1] <= params["pos"].shape[0]:
        raise ValueError(f"tokens must be (batch, T) with 1 <= T <= {params['pos'].shape[0]}; got shape "
                     f"{getattr(tokens, 'shape', ())}")
    check_finite("lora_scale", lora_scale)
    bsz, seq = tokens.shape
    d = params["wq"].shape[0]
    c: dict = {"tokens": tokens}
    x0 = params["emb"][tokens] + params["pos"][None, :seq]             # (B, T, d)
    x0f = x0.reshape(-1, d)
    q, k, v = (_proj(params, t, x0f, lora_scale, c).reshape(bsz, seq, d) for t in "qkv")
    if "prefix_k" in params:
        n_prefix = params["prefix_k"].shape[0]
        k = xp.concatenate([xp.broadcast_to(params["prefix_k"], (bsz, n_prefix, d)), k], axis=1)
        v = xp.concatenate([xp.broadcast_to(params["prefix_v"], (bsz, n_prefix, d)), v], axis=1)
    probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d))          # (B, T, L+T)
    o = probs @ v                                                      # (B, T, d)
    x1 = x0 + _proj(params, "o", o.reshape(-1, d), lora_scale, c).reshape(bsz, seq, d)
    u = x1 @ params["w1"] + params["b1"]                               # (B, T, h)
    x2 = x1 + xp.maximum(u, 0) @ params["w2"] + params["b2"]
    x3 = x2
    if "ad_down" in params:
        z = x2 @ params["ad_down"] + params["ad_down_b"]               # (B, T, r)
        x3 = x2 + xp.maximum(z, 0) @ params["ad_up"] + params["ad_up_b"]
        c["z"] = z
    pooled = x3.mean(axis=1)                                           # (B, d)
    c.update(x0f=x0f, q=q, k=k, v=v, probs=probs, o=o, x1=x1, u=u, x2=x2, pooled=pooled)
    return pooled @ params["head"] + params["head_b"], c


def _proj_backward(params: Params, t: str, x2d, dy, scale: float, cache: dict, grads: dict, trainable: set,
                   need_dx: bool = True):
    """Gradients of y = x W + s (x A) B: dW = xᵀdy, dB = s (xA)ᵀ dy, dA = s xᵀ (dy Bᵀ); returns dx (or None).

    A frozen W costs no dW; dx only when something below is trained (``need_dx``).
    """
    w = params["w" + t]
    if "w" + t in trainable:
        grads["w" + t] = x2d.T @ dy
    dx = dy @ w.T if need_dx else None
    if f"lora_a_{t}" in params:
        a, b = params[f"lora_a_{t}"], params[f"lora_b_{t}"]
        dy_bt = dy @ b.T                                               # (n, r)
        grads[f"lora_b_{t}"] = scale * (cache["xa_" + t].T @ dy)
        grads[f"lora_a_{t}"] = scale * (x2d.T @ dy_bt)
        if need_dx:
            dx = dx + scale * (dy_bt @ a.T)
    return dx


def backward(params: Params, cache: dict, dlogits, trainable: tuple[str, ...],
             lora_scale: float = 1.0) -> Params:
    """Gradients of the loss for the ``trainable`` parameters, given d loss / d logits (B, c)."""
    _check_params("params", params)
    check_type("cache", cache, dict)
    if "tokens" not in cache or "pooled" not in cache:
        raise ValueError("cache must be the dict forward() returned")
    check_array("dlogits", dlogits, kinds="f", shape=(cache["tokens"].shape[0], params["head"].shape[1]))
    for name in check_sequence("trainable", trainable):
        check_choice("trainable", name, tuple(params))
    check_finite("lora_scale", lora_scale)
    train = set(trainable)
    g: dict = {}
    bsz, seq = cache["tokens"].shape
    d = params["wq"].shape[0]
    g["head"], g["head_b"] = cache["pooled"].T @ dlogits, dlogits.sum(axis=0)
    only_head = train <= {"head", "head_b"}
    if only_head:
        return g
    dx3 = xp.broadcast_to((dlogits @ params["head"].T)[:, None, :] / seq, (bsz, seq, d))
    dx2 = dx3
    if "ad_down" in params:
        z = cache["z"]
        g["ad_up"] = xp.maximum(z, 0).reshape(-1, z.shape[-1]).T @ dx3.reshape(-1, d)
        g["ad_up_b"] = dx3.sum(axis=(0, 1))
        dz = (dx3 @ params["ad_up"].T) * (z > 0)
        g["ad_down"] = cache["x2"].reshape(-1, d).T @ dz.reshape(-1, dz.shape[-1])
        g["ad_down_b"] = dz.sum(axis=(0, 1))
        dx2 = dx3 + dz @ params["ad_down"].T
    u = cache["u"]
    if "w2" in train:  # frozen weights cost no dW (the saving of every PEFT method's backward)
        relu_u = xp.maximum(u, 0)
        g["w2"], g["b2"] = relu_u.reshape(-1, u.shape[-1]).T @ dx2.reshape(-1, d), dx2.sum(axis=(0, 1))
    du = (dx2 @ params["w2"].T) * (u > 0)
    if "w1" in train:
        g["w1"], g["b1"] = cache["x1"].reshape(-1, d).T @ du.reshape(-1, u.shape[-1]), du.sum(axis=(0, 1))
    dx1 = dx2 + du @ params["w1"].T
    do = _proj_backward(params, "o", cache["o"].reshape(-1, d), dx1.reshape(-1, d), lora_scale, cache, g,
                        train).reshape(bsz, seq, d)
    probs, k, v, q = cache["probs"], cache["k"], cache["v"], cache["q"]
    dprobs = do @ v.transpose(0, 2, 1)                                 # (B, T, L+T)
    dv = probs.transpose(0, 2, 1) @ do                                 # (B, L+T, d)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True)) / math.sqrt(d)
    dq = dscores @ k                                                   # (B, T, d)
    dk = dscores.transpose(0, 2, 1) @ q                                # (B, L+T, d)
    if "prefix_k" in params:
        n_prefix = params["prefix_k"].shape[0]
        g["prefix_k"], g["prefix_v"] = dk[:, :n_prefix].sum(axis=0), dv[:, :n_prefix].sum(axis=0)
        dk, dv = dk[:, n_prefix:], dv[:, n_prefix:]
    x0f = cache["x0f"]
    dx0 = dx1.reshape(-1, d)
    below = "emb" in train or "pos" in train  # only the embeddings need the gradient of x0
    for t, dy in (("q", dq), ("k", dk), ("v", dv)):
        dx = _proj_backward(params, t, x0f, dy.reshape(-1, d), lora_scale, cache, g, train, need_dx=below)
        dx0 = dx0 + dx if below else dx0
    if "emb" in train:
        onehot = (cache["tokens"].reshape(-1)[:, None] == xp.arange(params["emb"].shape[0])[None, :])
        g["emb"] = onehot.astype(dx0.dtype).T @ dx0
        g["pos"] = xp.zeros_like(params["pos"])
        g["pos"][:seq] = dx0.reshape(bsz, seq, d).sum(axis=0)
    return {name: g[name] for name in trainable}


def step_flops(config: TinyConfig, method: str, batch_size: int, rank: int = 4, prefix_len: int = 4,
               lora_targets: tuple[str, ...] = ("q", "v")) -> dict[str, int]:
    """Matmul FLOPs (2 per multiply-add) of one training step of :func:`forward` and :func:`backward`, by part.

    ``forward``; ``backward: dX`` (gradients flowing down through every matmul, weights and attention); ``backward:
    dW`` (the weights' own gradients, paid only for trained weights; LoRA's A and B are in it). Each weight
    matmul of the forward, x W with x (N, k) and W (k, m), costs 2·N·k·m; its backward costs that again for dX
    = dY Wᵀ and again for dW = xᵀ dY, so a dense step is ≈ 3× the forward and one with frozen weights ≈ 2×.
    Element-wise work (softmax, ReLU, Adam) is left out; with ``full`` the embedding gather's gradient is a
    one-hot matmul, counted in dW.
    """
    check_type("config", config, TinyConfig)
    check_choice("method", method, METHODS)
    check_int("batch_size", batch_size, low=1)
    check_int("rank", rank, low=1, high=config.d_model)
    check_int("prefix_len", prefix_len, low=1, high=4096)
    for target in check_names("lora_targets", lora_targets, min_size=1):  # checked for every method: a typo is one
        check_choice("lora_targets", target, PROJECTIONS)
    b, t, d, h, c = batch_size, config.seq_len, config.d_model, config.d_hidden, config.n_classes
    n, keys = b * t, t + (prefix_len if method == "prefix" else 0)
    adapted = lora_targets if method == "lora" else ()
    fwd = 2 * (4 * n * d * d + 2 * n * d * h + b * d * c + 2 * b * t * keys * d)
    fwd += sum(2 * 2 * n * d * rank for _ in adapted) + (2 * 2 * n * d * rank if method == "adapter" else 0)
    below = method == "full"  # does anything under the attention block train (the embeddings)?
    dx = 2 * (b * d * c + 2 * n * d * h + n * d * d + 2 * 2 * b * t * keys * d)   # head, MLP, W_o, attention
    dx += 2 * 3 * n * d * d if below else 0                                       # W_q, W_k, W_v down to x0
    dx += 2 * 2 * n * d * rank if method == "adapter" else 0
    dx += sum(2 * n * d * rank for t_ in adapted if t_ == "o" or below)
    if method == "head":
        dx = 0                                                                    # backward stops at the head
    dw = 2 * b * d * c                                                            # the head is always trained
    if method == "full":
        dw += 2 * (4 * n * d * d + 2 * n * d * h + n * config.vocab * d)
    dw += sum(2 * 2 * n * d * rank for _ in adapted) + (2 * 2 * n * d * rank if method == "adapter" else 0)
    return {"forward": fwd, "backward: dX": dx, "backward: dW": dw}
