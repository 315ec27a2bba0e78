"""FSDP (ZeRO-3) on simulated ranks: a small MLP whose weights live as flat shards, and a step-time model.

Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel". Each layer's weight
matrix W_i (d_i, d_{i+1}) of Ψ_i elements is one *flat parameter*: flattened, zero-padded to a multiple
of N and cut into N shards of k_i = ⌈Ψ_i/N⌉ elements; rank r keeps shard r only. A step, per layer:

    forward:   all-gather W_i (N·k_i elements), compute, free the gathered copy
    backward:  all-gather W_i again, compute dX and dW_i, free W_i, reduce-scatter dW_i (mean over ranks)
    update:    each rank updates its own shard with its own slice of the gradient

The model here: h_{i+1} = tanh(h_i W_i) for every layer but the last, which is linear; the loss is
:func:`mlsys_lab.nn.mse_loss` on each rank's slice of the batch, averaged over the ranks. The forward and
backward of one layer are given (:func:`layer_forward`, :func:`layer_backward`); the exercise of lesson 08
writes the loop around them. The step-time model of prefetching and hybrid sharding is in
:mod:`mlsys_lab.parallelism.fsdp_timeline`.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.nn import mse_loss
from mlsys_lab.validation import check_array, check_bool, check_finite, check_int, check_number, check_sequence


def layer_forward(h, w, last: bool):
    """One layer: (tanh(h W), cache), or (h W, cache) for the ``last`` layer. h: (b, d_in); w: (d_in, d_out)."""
    h, w = check_array("h", h, ndim=2), check_array("w", w, ndim=2)
    check_bool("last", last)
    if h.shape[1] != w.shape[0]:
        raise ValueError(f"w must have {h.shape[1]} rows (h has {h.shape[1]} columns); got shape {w.shape}")
    pre = h @ w                                                              # (b, d_out)
    out = pre if last else np.tanh(pre)
    return out, (h, out, last)  # activations only: the weights are not kept (FSDP gathers them again)


def layer_backward(dout, cache, w):
    """(dL/dh, dL/dW) of one layer from dL/d(out) (b, d_out), the cache :func:`layer_forward` returned and W.

    The cache holds the layer's input and output, not its weights: like FSDP, the backward needs W again.
    """
    if not isinstance(cache, tuple) or len(cache) != 3:
        raise TypeError(f"cache must be the 3-tuple layer_forward returns; got {type(cache).__name__} {cache!r:.40}")
    h, out, last = cache
    dout, w = check_array("dout", dout, ndim=2), check_array("w", w, ndim=2)
    if dout.shape != out.shape:
        raise ValueError(f"dout must have the shape of the layer's output {out.shape}; got {dout.shape}")
    if w.shape != (h.shape[1], out.shape[1]):
        raise ValueError(f"w must have the layer's shape {(h.shape[1], out.shape[1])}; got {w.shape}")
    dpre = dout if last else dout * (1.0 - out * out)                         # tanh' = 1 − tanh²
    return dpre @ w.T, h.T @ dpre                                             # (b, d_in), (d_in, d_out)


def mlp_loss_and_grads(x, target, weights: list):
    """Single-device reference: (loss, [dL/dW_i]) of the MLP on the whole batch x (b, d_0) -> target (b, d_L)."""
    check_array("x", x, ndim=2, kinds="f")
    check_sequence("weights", weights, min_size=1)
    if getattr(weights[0], "ndim", 0) == 2 and x.shape[1] != weights[0].shape[0]:
        raise ValueError(f"x must have {weights[0].shape[0]} columns (the rows of weights[0]); got shape {x.shape}")
    h, caches = x, []
    for i, w in enumerate(weights):
        h, cache = layer_forward(h, w, i == len(weights) - 1)
        caches.append(cache)
    loss, dy = mse_loss(h, target)
    grads = [None] * len(weights)
    for i in reversed(range(len(weights))):
        dy, grads[i] = layer_backward(dy, caches[i], weights[i])
    return loss, grads


def shard_size(n_elements: int, n_ranks: int) -> int:
    """k = ⌈Ψ/N⌉: the elements of one shard of a flat parameter of Ψ elements padded to a multiple of N."""
    return -(-check_int("n_elements", n_elements, low=0) // check_int("n_ranks", n_ranks, low=1))


def shard_flat(w, n_ranks: int) -> list[np.ndarray]:
    """W flattened, zero-padded to N·⌈Ψ/N⌉ elements and cut into N shards (rank r keeps entry r)."""
    flat = np.ravel(check_array("w", w, finite=True))
    k = shard_size(flat.size, check_int("n_ranks", n_ranks, low=1, high=2**20))
    padded = np.concatenate([flat, np.zeros(n_ranks * k - flat.size, dtype=flat.dtype)])
    return [padded[r * k:(r + 1) * k].copy() for r in range(n_ranks)]


def unshard_flat(shards: list, shape: tuple[int, ...]) -> np.ndarray:
    """The matrix of ``shape`` from its N shards (the padding dropped): the inverse of :func:`shard_flat`."""
    flat = np.concatenate([np.ravel(check_array("shards[r]", s)) for s in check_sequence("shards", shards, min_size=1)])
    size = int(np.prod([check_int("shape[i]", n, low=1) for n in check_sequence("shape", shape, min_size=1)]))
    if flat.size < size:
        raise ValueError(f"shards hold {flat.size} elements, fewer than the {size} of shape {tuple(shape)}")
    return flat[:size].reshape(shape)


def sgd_reference(x, target, weights: list, lr: float) -> list[np.ndarray]:
    """One single-device SGD step, W_i − lr·∂L/∂W_i: what an FSDP step must equal (unsharded)."""
    check_array("x", x, ndim=2, kinds="f")
    for w in check_sequence("weights", weights, min_size=1):
        check_array("weights", w, ndim=2, kinds="f")
    if x.shape[1] != weights[0].shape[0]:
        raise ValueError(f"x must have {weights[0].shape[0]} columns (the rows of weights[0]); got shape {x.shape}")
    check_number("lr", lr, low=0.0, high=10.0)
    check_finite("lr", lr, low=0.0)
    _, grads = mlp_loss_and_grads(x, target, weights)
    return [w - lr * g for w, g in zip(weights, grads, strict=True)]
