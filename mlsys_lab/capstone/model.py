"""A small decoder-only transformer (GPT-2's pre-norm block) in NumPy: forward and backward written out once.

Shapes: B sequences, T positions, C = d_model, H heads of D = C/H, V characters, F = 4C.

    x0 = wte[idx] + wpe[:T]                                   (B, T, C)
    per block:  x = x + proj(attention(LN1(x)))               causal, H heads
                x = x + out(gelu(fc(LN2(x))))                 C -> 4C -> C
    logits = LNf(x) @ head.w                                  (B, T, V)
    loss = mean over B·T tokens of cross-entropy(logits, next char)

Layer norm is non-affine normalisation (lesson 06's exercise: ``layer_norm_backward``) followed by a gain and a
bias. All parameters live in one flat vector ``theta`` (:func:`param_layout` names the slices): the gradient is then one
buffer, which is what data parallelism all-reduces and what ZeRO shards; a checkpoint is three such vectors
(θ, Adam's m and v). The two operators the learner wrote in lesson 06 come in through :class:`ModelOps`: the
fused softmax cross-entropy and the layer-norm backward. :func:`course_ops` holds the course's versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.capstone.lora import Adapters
from mlsys_lab.capstone.moe import (
    MoeConfig,
    _moe_aux,
    _moe_backward,
    _moe_forward,
    capacity_routing,
    gate_combine,
    moe_layout,
)
from mlsys_lab.capstone.operators import LN_EPS, attention_vjp, cross_entropy_with_grad, layer_norm_grad
from mlsys_lab.moe.gating import aux_loss_and_grad
from mlsys_lab.nn import GELU_C, softmax
from mlsys_lab.validation import (
    check_array,
    check_choice,
    check_index_array,
    check_int,
    check_type,
)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the model. The defaults train on a 2-core CPU in about a minute (about 0.1 M parameters)."""

    vocab_size: int = 62
    context: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dtype: str = "float32"
    moe: MoeConfig | None = None  # a mixture of experts in place of every block's MLP (:mod:`.moe`)

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, low=2, high=256)
        check_int("context", self.context, low=1, high=1 << 16)
        check_int("d_model", self.d_model, low=1, high=1 << 16)
        check_int("n_heads", self.n_heads, low=1, high=self.d_model)
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads must divide d_model={self.d_model}; got {self.n_heads}")
        check_int("n_layers", self.n_layers, low=1, high=1024)
        check_choice("dtype", self.dtype, ("float32", "float64"))
        if self.moe is not None:
            check_type("moe", self.moe, MoeConfig)


@dataclass(frozen=True)
class ModelOps:
    """The operators the learner may have written: ``cross_entropy(logits, labels, label_smoothing, grad_out)``
    -> (losses, grad_logits) (lesson 06, exercise 6), ``layer_norm_backward(x, grad_out)`` -> dx (exercise 1) and
    ``attention_backward(q, k, v, probs, dy, scale)`` -> (dq, dk, dv) (this lesson's first exercise); for a model
    with experts, lesson 11's ``route_with_capacity(logits, k, capacity)``, ``top_k_gate(logits, k, capacity)`` and
    ``aux_loss(router_logits, k)`` -> (loss, d loss / d router_logits)."""

    cross_entropy: Callable
    layer_norm_backward: Callable
    attention_backward: Callable
    route_with_capacity: Callable = capacity_routing
    top_k_gate: Callable = gate_combine
    aux_loss: Callable = aux_loss_and_grad

    def __post_init__(self) -> None:
        for name in ("cross_entropy", "layer_norm_backward", "attention_backward", "route_with_capacity", "top_k_gate",
                     "aux_loss"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name} must be a function; got {type(getattr(self, name)).__name__}")


def _config(config) -> GPTConfig:
    return check_type("config", config, GPTConfig)


def param_layout(config: GPTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter, in the order they sit in ``theta``."""
    _config(config)
    c, v, f = config.d_model, config.vocab_size, 4 * config.d_model
    names = [("wte", (v, c)), ("wpe", (config.context, c))]
    for layer in range(config.n_layers):
        p = f"h{layer}."
        names += [(p + "ln1.g", (c,)), (p + "ln1.b", (c,)), (p + "attn.w", (c, 3 * c)), (p + "attn.b", (3 * c,)),
                  (p + "proj.w", (c, c)), (p + "proj.b", (c,)), (p + "ln2.g", (c,)), (p + "ln2.b", (c,))]
        mlp = [("fc.w", (c, f)), ("fc.b", (f,)), ("out.w", (f, c)), ("out.b", (c,))] if config.moe is None else \
            moe_layout(c, config.moe)
        names += [(p + name, shape) for name, shape in mlp]
    return names + [("lnf.g", (c,)), ("lnf.b", (c,)), ("head.w", (c, v))]


def count_params(config: GPTConfig) -> int:
    """How many numbers ``theta`` holds."""
    return sum(int(np.prod(shape)) for _, shape in param_layout(config))


def views(theta: np.ndarray, config: GPTConfig) -> dict[str, np.ndarray]:
    """Name -> a view of ``theta`` of the parameter's shape (writing a view writes ``theta``)."""
    check_array("theta", theta, ndim=1, kinds="f")
    if theta.shape != (count_params(config),):
        raise ValueError(f"theta must have shape ({count_params(config)},) for this config; got {theta.shape}")
    out, start = {}, 0
    for name, shape in param_layout(config):
        size = int(np.prod(shape))
        out[name] = theta[start:start + size].reshape(shape)
        start += size
    return out


def flatten(arrays: dict, config: GPTConfig) -> np.ndarray:
    """The inverse of :func:`views`: one flat vector of the named arrays, in :func:`param_layout` order."""
    missing = [name for name, _ in param_layout(config) if name not in check_type("arrays", arrays, dict)]
    if missing:
        raise ValueError(f"arrays must hold every parameter of the config; {missing[:3]} are missing")
    return np.concatenate([np.asarray(arrays[name], dtype=config.dtype).reshape(-1)
                           for name, _ in param_layout(config)])


def init_theta(config: GPTConfig, seed: int = 0) -> np.ndarray:
    """GPT-2's initialisation: N(0, 0.02²) weights, residual projections scaled by 1/√(2L), gains 1, biases 0."""
    g = np.random.default_rng(check_int("seed", seed, low=0))
    theta = np.zeros(count_params(config), dtype=config.dtype)
    for name, view in views(theta, config).items():
        if name.endswith((".g",)):
            view[...] = 1.0
        elif name.endswith((".w", "wte", "wpe")):
            std = 0.02 / np.sqrt(2 * config.n_layers) if name.endswith(("proj.w", "out.w")) else 0.02
            view[...] = g.normal(0.0, std, size=view.shape)
    return theta


# --- the pieces of the forward pass and their backward --------------------------------------------
def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray):
    """Non-affine layer norm of the last axis, then gain and bias; returns y and x̂ (for the backward)."""
    mu = x.mean(axis=-1, keepdims=True)
    xhat = (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + LN_EPS)
    return xhat * gain + bias, xhat


def _layer_norm_back(ops: ModelOps, x, xhat, gain, dy, grads: dict, prefix: str):
    """dL/dx of :func:`_layer_norm`: gain and bias here, the normalisation by ``ops.layer_norm_backward``."""
    c = x.shape[-1]
    grads[prefix + ".g"][...] = (dy * xhat).reshape(-1, c).sum(axis=0)
    grads[prefix + ".b"][...] = dy.reshape(-1, c).sum(axis=0)
    dx = ops.layer_norm_backward(x.reshape(-1, c), (dy * gain).reshape(-1, c))
    return np.asarray(dx, dtype=x.dtype).reshape(x.shape)


def _gelu_and_grad(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mlsys_lab.nn.gelu` (tanh form) and its derivative at ``u``, sharing one tanh.

    Written with u·u·u: NumPy's ``u**3`` takes a slow path for negative float32 values (about 15× slower here).
    """
    u2 = u * u
    t = np.tanh(GELU_C * (u + 0.044715 * u2 * u))
    return 0.5 * u * (1 + t), 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * u2)


def _heads(a: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, T, C) -> (B, H, T, D)."""
    b, t, c = a.shape
    return a.reshape(b, t, n_heads, c // n_heads).transpose(0, 2, 1, 3)


def _merge(a: np.ndarray) -> np.ndarray:
    """(B, H, T, D) -> (B, T, C)."""
    b, h, t, d = a.shape
    return a.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _matmul(x: np.ndarray, w: dict, name: str, adapters: Adapters | None) -> np.ndarray:
    """x W of the linear layer ``name`` (its weight ``name.w``), through its LoRA adapter where it has one."""
    return x @ w[name + ".w"] if adapters is None else adapters.linear(name, x, w[name + ".w"])


def _attention(h: np.ndarray, w: dict, p: str, n_heads: int, adapters: Adapters | None = None):
    """Causal multi-head self-attention of h (B, T, C); returns its output before the projection, and a cache."""
    c = h.shape[-1]
    qkv = _matmul(h, w, p + "attn", adapters) + w[p + "attn.b"]          # (B, T, 3C)
    q, k, v = (_heads(qkv[..., i * c:(i + 1) * c], n_heads) for i in range(3))  # (B, H, T, D) each
    scale = 1.0 / np.sqrt(c // n_heads)
    t = h.shape[1]
    scores = (q @ k.transpose(0, 1, 3, 2)) * scale                        # (B, H, T, T)
    scores = np.where(np.tri(t, dtype=bool), scores, -np.inf)             # position i sees j <= i
    probs = softmax(scores).astype(h.dtype)
    return _merge(probs @ v), (q, k, v, probs, scale)                     # (B, T, C)


def _attention_back(ops: ModelOps, dy: np.ndarray, cache, n_heads: int) -> np.ndarray:
    """d loss / d qkv (B, T, 3C) from d loss / d (attention output before projection) (B, T, C)."""
    q, k, v, probs, scale = cache
    dq, dk, dv = (np.asarray(d, dtype=dy.dtype) for d in ops.attention_backward(q, k, v, probs, _heads(dy, n_heads),
                                                                                scale))
    return np.concatenate([_merge(dq), _merge(dk), _merge(dv)], axis=-1)


def _linear_back(x: np.ndarray, dy: np.ndarray, weight: np.ndarray, grads: dict, name: str,
                 adapters: Adapters | None = None, adapter_grads: dict | None = None) -> np.ndarray:
    """y = x W + b: fills d W and d b (summed over every row) and returns d x. With ``adapters`` W and b are frozen:
    only d x, and the adapter's dA and dB (into ``adapter_grads``) where the layer has one."""
    if adapters is not None:
        return adapters.linear_back(name, x, weight, dy, adapter_grads)
    grads[name + ".w"][...] = x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
    grads[name + ".b"][...] = dy.reshape(-1, dy.shape[-1]).sum(axis=0)
    return dy @ weight.T


# --- the whole model --------------------------------------------------------------------------------
def _check_adapters(adapters, config: GPTConfig) -> Adapters | None:
    """None, or adapters whose layers are linears of the blocks of ``config`` with matching A and B shapes."""
    if adapters is None:
        return None
    shapes = dict(param_layout(config))
    for name, a in check_type("adapters", adapters, Adapters).a.items():
        shape = shapes.get(f"{name}.w") if name.endswith((".attn", ".proj", ".fc", ".out")) else None
        if shape is None or a.shape[0] != shape[0] or adapters.b[name].shape[1] != shape[1]:
            raise ValueError(f"adapters must adapt linears of this config's blocks (h0.attn, h0.proj, h0.fc, h0.out, "
                             f"...) with A (d_in, r) and B (r, d_out) of their weight's shape {shape}; got {name!r} "
                             f"with A {a.shape} and B {adapters.b[name].shape}")
    return adapters


def embed(w: dict, idx: np.ndarray) -> np.ndarray:
    """x0 = wte[idx] + wpe[:T], (B, T, C): the first stage of a pipeline starts here."""
    return w["wte"][idx] + w["wpe"][:idx.shape[1]]


def dense_mlp(h2: np.ndarray, w: dict, p: str, adapters: Adapters | None = None):
    """out(gelu(fc(h2))) of block ``p`` on one process, and the cache :func:`dense_mlp_back` needs."""
    u = _matmul(h2, w, p + "fc", adapters) + w[p + "fc.b"]               # (B, T, 4C)
    a, da_du = _gelu_and_grad(u)
    return _matmul(a, w, p + "out", adapters) + w[p + "out.b"], (h2, da_du, a)


def dense_mlp_back(dy: np.ndarray, cache, w: dict, g: dict, p: str, adapters: Adapters | None = None,
                   tuned: dict | None = None) -> np.ndarray:
    """d loss / d h2 of :func:`dense_mlp` from d loss / d output; fills the MLP's gradients in ``g``."""
    h2, da_du, a = cache
    da = _linear_back(a, dy, w[p + "out.w"], g, p + "out", adapters, tuned)
    return _linear_back(h2, da * da_du, w[p + "fc.w"], g, p + "fc", adapters, tuned)


def transformer_block(x: np.ndarray, w: dict, layer: int, config: GPTConfig, ops: ModelOps,
                  adapters: Adapters | None = None, mlp: Callable = dense_mlp):
    """Block ``layer`` on x (B, T, C): x + proj(attention(LN1 x)), then + the MLP (``mlp(h2, w, prefix,
    adapters)`` -> (output, cache): :func:`dense_mlp`, or a tensor-parallel one) or the experts (an ``mlp`` given
    for a model with experts replaces them: :class:`~mlsys_lab.capstone.ep.ExpertParallelMoe`); and its cache."""
    p, b, t = f"h{layer}.", x.shape[0], x.shape[1]
    h1, xhat1 = _layer_norm(x, w[p + "ln1.g"], w[p + "ln1.b"])
    att, att_cache = _attention(h1, w, p, config.n_heads, adapters)
    x2 = x + _matmul(att, w, p + "proj", adapters) + w[p + "proj.b"]
    h2, xhat2 = _layer_norm(x2, w[p + "ln2.g"], w[p + "ln2.b"])
    if config.moe is None or mlp is not dense_mlp:  # with experts, an mlp given replaces them (expert parallel)
        y, mlp_cache = mlp(h2, w, p, adapters)
    else:  # the B·T tokens of the batch, in config.moe.routing_groups routing groups of whole sequences
        y, mlp_cache = _moe_forward(h2.reshape(b * t, -1), w, p, config.moe, ops.route_with_capacity,
                                    ops.top_k_gate, _gelu_and_grad, ops.aux_loss, n_rows=b)
    return x2 + y.reshape(x2.shape), (x, h1, xhat1, att, att_cache, x2, xhat2, mlp_cache)


def transformer_block_back(dx: np.ndarray, cache, w: dict, g: dict, layer: int, config: GPTConfig, ops: ModelOps,
                   adapters: Adapters | None = None, tuned: dict | None = None,
                   mlp_back: Callable = dense_mlp_back) -> np.ndarray:
    """d loss / d (block input) from d loss / d (block output); fills the block's gradients in ``g`` (with
    ``adapters``, the adapters' in ``tuned``). ``mlp_back(dy, cache, w, g, prefix, adapters, tuned)`` -> dh2."""
    p = f"h{layer}."
    x, h1, xhat1, att, att_cache, x2, xhat2, mlp_cache = cache
    if config.moe is None or mlp_back is not dense_mlp_back:
        dh2 = mlp_back(dx, mlp_cache, w, g, p, adapters, tuned)
    else:
        dh2 = _moe_backward(dx.reshape(-1, dx.shape[-1]), mlp_cache, w, g, p).reshape(dx.shape)
    dx2 = dx + _layer_norm_back(ops, x2, xhat2, w[p + "ln2.g"], dh2, g, p + "ln2")
    datt = _linear_back(att, dx2, w[p + "proj.w"], g, p + "proj", adapters, tuned)
    dh1 = _linear_back(h1, _attention_back(ops, datt, att_cache, config.n_heads), w[p + "attn.w"], g, p + "attn",
                       adapters, tuned)
    return dx2 + _layer_norm_back(ops, x, xhat1, w[p + "ln1.g"], dh1, g, p + "ln1")


def head_loss_and_back(x: np.ndarray, targets: np.ndarray, w: dict, g: dict, ops: ModelOps, frozen: bool = False,
                       dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """The last stage: logits = LNf(x) @ head.w, per-token losses (B·T,) against ``targets``, and d loss / d x of
    the mean loss; fills head.w's and LNf's gradients in ``g`` (head.w's not when ``frozen``)."""
    dtype = x.dtype if dtype is None else dtype
    hf, xhatf = _layer_norm(x, w["lnf.g"], w["lnf.b"])
    logits = hf @ w["head.w"]
    b, t, v = logits.shape
    n = b * t
    losses, dlogits = ops.cross_entropy(logits.reshape(n, v), targets.reshape(n), 0.0, np.full(n, 1.0 / n, dtype=dtype))
    dlogits = np.asarray(dlogits, dtype=dtype).reshape(b, t, v)
    if not frozen:
        g["head.w"][...] = hf.reshape(n, -1).T @ dlogits.reshape(n, v)
    return np.asarray(losses), _layer_norm_back(ops, x, xhatf, w["lnf.g"], dlogits @ w["head.w"].T, g, "lnf")


def embed_back(dx: np.ndarray, idx: np.ndarray, g: dict) -> None:
    """The gradients of wte and wpe from d loss / d x0."""
    np.add.at(g["wte"], idx, dx)
    g["wpe"][:idx.shape[1]] = dx.sum(axis=0)


def _check_tokens(idx, config: GPTConfig) -> None:
    check_index_array("idx", check_array("idx", idx, ndim=2, kinds="iu"), config.vocab_size, of_name="characters")
    if idx.shape[1] > config.context:
        raise ValueError(f"idx must have at most context={config.context} positions; got {idx.shape[1]}")


def gpt_forward(theta: np.ndarray, idx: np.ndarray, config: GPTConfig, adapters: Adapters | None = None,
                ops: ModelOps | None = None):
    """Logits (B, T, V) of token ids ``idx`` (B, T ≤ context), and the blocks' caches; with ``adapters``
    (:class:`~mlsys_lab.capstone.lora.Adapters`), their layers run W + s·A·B, factored. Of ``ops`` the forward
    runs only a mixture of experts' routing and gate."""
    ops = course_ops() if ops is None else check_type("ops", ops, ModelOps)
    w = views(theta, config)
    adapters = _check_adapters(adapters, config)
    _check_tokens(idx, config)
    x, cache = embed(w, idx), []
    for layer in range(config.n_layers):
        x, block_cache = transformer_block(x, w, layer, config, ops, adapters)
        cache.append(block_cache)
    hf, _ = _layer_norm(x, w["lnf.g"], w["lnf.b"])
    return hf @ w["head.w"], cache


def loss_and_grad(theta: np.ndarray, idx: np.ndarray, targets: np.ndarray, config: GPTConfig,
                  ops: ModelOps | None = None, adapters: Adapters | None = None, mlp: Callable = dense_mlp,
                  mlp_back: Callable = dense_mlp_back) -> tuple[float, np.ndarray | dict]:
    """Mean cross-entropy of next-token ``targets`` (B, T) (+ α · every MoE block's auxiliary loss, when the config's
    ``aux_alpha`` > 0) and its gradient, a flat vector shaped like ``theta``.

    With ``adapters`` θ is frozen and the gradient is the adapters' instead, {layer: (dA, dB)}: no dW is computed.
    ``mlp`` and ``mlp_back`` run every block's MLP (:func:`transformer_block`): a tensor-parallel pair, for instance.
    """
    ops = course_ops() if ops is None else check_type("ops", ops, ModelOps)
    _config(config)
    _check_tokens(idx, config)
    if check_array("targets", targets, kinds="iu").shape != np.shape(idx):
        raise ValueError(f"targets must have the shape of idx {np.shape(idx)}; got {np.shape(targets)}")
    check_index_array("targets", targets, config.vocab_size, of_name="characters")
    for name, fn in (("mlp", mlp), ("mlp_back", mlp_back)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function (as dense_mlp, dense_mlp_back); got {type(fn).__name__}")
    w = views(theta, config)
    adapters = _check_adapters(adapters, config)
    x, cache = embed(w, idx), []
    for layer in range(config.n_layers):
        x, block_cache = transformer_block(x, w, layer, config, ops, adapters, mlp)
        cache.append(block_cache)
    tuned: dict = {}  # the adapters' (dA, dB) by layer
    grad = np.zeros_like(theta)
    g = views(grad, config)
    losses, dx = head_loss_and_back(x, targets, w, g, ops, frozen=adapters is not None, dtype=theta.dtype)
    loss = float(np.mean(losses))
    if config.moe is not None and config.moe.aux_alpha > 0:
        loss += sum(_moe_aux(block_cache[-1]) for block_cache in cache)
    for layer in reversed(range(config.n_layers)):
        dx = transformer_block_back(dx, cache[layer], w, g, layer, config, ops, adapters, tuned, mlp_back)
    if adapters is not None:
        return loss, tuned
    embed_back(dx, idx, g)
    return loss, grad


def course_ops() -> ModelOps:
    """The course's cross-entropy and layer-norm backward."""
    return ModelOps(cross_entropy_with_grad, layer_norm_grad, attention_vjp)
