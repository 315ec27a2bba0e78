"""QLoRA training: LoRA adapters on a frozen base kept as NF4 codes, dequantized on the fly.

A LoRA linear layer and its backward pass (Hu et al. 2021, Section 4.1), shapes x (n, d_in), W (d_in, d_out),
A (d_in, r), B (r, d_out), upstream gradient dY (n, d_out)::

    y  = x W + s·(x A) B                      forward: never forms the d_in × d_out product A B
    dX = dY Wᵀ + s·(dY Bᵀ) Aᵀ                 what the layers below need
    dA = s·xᵀ (dY Bᵀ),  dB = s·(x A)ᵀ dY      the adapter's gradients, through (n, r) intermediates
                                              no dW = xᵀ dY: W is frozen (a third of a dense step's FLOPs)

The QLoRA classifier of the exercise (Dettmers et al. 2023, Section 3: NF4 storage, bf16 compute; here
float64), two such layers with a ReLU between, at the tiny transformer's MLP widths::

    W1 = nf4_dequantize(codes1, absmax1) (d, h)    W2 = nf4_dequantize(codes2, absmax2) (h, c)
    z = x W1 + s (x A1) B1,   u = relu(z),   logits = u W2 + s (u A2) B2,   loss = cross-entropy

A *state* is a plain dict: ``codes1``, ``absmax1``, ``codes2``, ``absmax2`` (the frozen base), ``a1``, ``b1``,
``a2``, ``b2`` (the adapters; W_i's shape is (a_i rows, b_i columns)), ``levels`` (the 16 NF4 values),
``block_size`` and ``scale``. :func:`qlora_step` is one SGD step on the adapters; codes and absmax come back
unchanged, bit for bit.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.nn import cross_entropy
from mlsys_lab.peft.nf4 import nf4_dequantize, nf4_quantize
from mlsys_lab.training_memory.quantize import nf4_levels
from mlsys_lab.validation import check_array, check_bool, check_finite, check_int, check_number, check_type

ADAPTERS = ("a1", "b1", "a2", "b2")
BASE = ("codes1", "absmax1", "codes2", "absmax2")


def _check_lora(x, w, a, b, scale, dy=None) -> None:
    """x (n, d_in), w (d_in, d_out), a (d_in, r), b (r, d_out) [, dy (n, d_out)]: dtypes and shapes only (cheap)."""
    n, d_in = check_array("x", x, ndim=2, kinds="f").shape
    d_out = check_array("w", w, ndim=2, kinds="f").shape[1]
    rank = check_array("a", a, ndim=2, kinds="f").shape[1]
    check_array("b", b, ndim=2, kinds="f")
    wanted = {"w": (d_in, d_out), "a": (d_in, rank), "b": (rank, d_out)}
    for name, array in (("w", w), ("a", a), ("b", b)) + ((("dy", dy),) if dy is not None else ()):
        shape = wanted.get(name, (n, d_out))
        if array.shape != shape:
            raise ValueError(f"{name} must have shape {shape} for x {x.shape}, w (d_in, d_out), a (d_in, r), "
                             f"b (r, d_out); got {array.shape}")
    check_finite("scale", scale)


def lora_linear(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """y = x W + s·(x A) B, (n, d_out)."""
    _check_lora(x, w, a, b, scale)
    return x @ w + scale * ((x @ a) @ b)


def lora_linear_backward(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float,
                         dy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dX (n, d_in), dA (d_in, r), dB (r, d_out)) of y = x W + s (x A) B; W is frozen, so no dW."""
    check_array("dy", dy, ndim=2, kinds="f")
    _check_lora(x, w, a, b, scale, dy)
    dy_bt = dy @ b.T                                                   # (n, r): the only new intermediate
    return dy @ w.T + scale * (dy_bt @ a.T), scale * (x.T @ dy_bt), scale * ((x @ a).T @ dy)


def _check_state(state) -> None:
    """A QLoRA state as :func:`init_qlora_state` makes it: TypeError/ValueError naming ``state``."""
    check_type("state", state, dict)
    missing = [key for key in (*ADAPTERS, *BASE, "levels", "block_size", "scale") if key not in state]
    if missing:
        raise ValueError(f"state must be what init_qlora_state returns; {missing} missing")


def base_weights(state: dict) -> tuple[np.ndarray, np.ndarray]:
    """(W1, W2) dequantized from the state's NF4 codes, in the shapes the adapters imply."""
    _check_state(state)
    levels, block = state["levels"], state["block_size"]
    w1 = nf4_dequantize(state["codes1"], state["absmax1"], levels, block)
    w2 = nf4_dequantize(state["codes2"], state["absmax2"], levels, block)
    return (w1.reshape(state["a1"].shape[0], state["b1"].shape[1]),
            w2.reshape(state["a2"].shape[0], state["b2"].shape[1]))


def init_qlora_state(w1: np.ndarray, w2: np.ndarray, rank: int = 4, scale: float = 2.0, block_size: int = 64,
                     seed: int = 0, zero_b: bool = True) -> dict:
    """NF4-quantize the base (W1 (d, h), W2 (h, c)); A Gaussian (std 1/√d_in), B zero (LoRA's start) or random."""
    w1 = check_array("w1", w1, ndim=2, finite=True)
    w2 = check_array("w2", w2, ndim=2, finite=True)
    if w1.shape[1] != w2.shape[0]:
        raise ValueError(f"w1 (d, h) and w2 (h, c) must share h; got {w1.shape} and {w2.shape}")
    rank = check_int("rank", rank, low=1, high=min(*w1.shape, *w2.shape))
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    check_bool("zero_b", zero_b)
    levels = nf4_levels()
    state: dict = {"levels": levels, "block_size": check_int("block_size", block_size, low=1),
                   "scale": check_finite("scale", scale)}
    for i, w in (("1", w1), ("2", w2)):
        state["codes" + i], state["absmax" + i] = nf4_quantize(w, levels, block_size)
        state["a" + i] = rng.normal(0, w.shape[0] ** -0.5, size=(w.shape[0], rank))
        state["b" + i] = np.zeros((rank, w.shape[1])) if zero_b else rng.normal(0, 0.5, size=(rank, w.shape[1]))
    return state


def qlora_loss_and_grads(state: dict, x: np.ndarray, labels: np.ndarray) -> tuple[float, dict]:
    """Cross-entropy of the classifier on (x (n, d), labels (n,)) and its gradients in A1, B1, A2, B2 only."""
    _check_state(state)
    check_array("x", x, ndim=2, kinds="f", shape=(None, state["a1"].shape[0]))
    check_array("labels", labels, kinds="iu", shape=(x.shape[0],))
    s = state["scale"]
    w1, w2 = base_weights(state)                                       # dequantized on the fly
    z = lora_linear(x, w1, state["a1"], state["b1"], s)                # (n, h)
    u = np.maximum(z, 0)
    loss, dlogits = cross_entropy(lora_linear(u, w2, state["a2"], state["b2"], s), labels)
    du, da2, db2 = lora_linear_backward(u, w2, state["a2"], state["b2"], s, dlogits)
    _, da1, db1 = lora_linear_backward(x, w1, state["a1"], state["b1"], s, du * (z > 0))
    return loss, {"a1": da1, "b1": db1, "a2": da2, "b2": db2}


def qlora_step(state: dict, x: np.ndarray, labels: np.ndarray, lr: float) -> tuple[dict, float]:
    """One SGD step on the adapters: (the new state, the loss before the step). The base is left as it is."""
    lr = check_number("lr", lr, low=0, high=10.0)
    loss, grads = qlora_loss_and_grads(state, x, labels)
    new = dict(state)
    for name in ADAPTERS:
        new[name] = state[name] - lr * grads[name]
    return new, loss


def qlora_loss(state: dict, x: np.ndarray, labels: np.ndarray) -> float:
    """The classifier's loss on (x, labels), computed from the state (its base read from the codes)."""
    return qlora_loss_and_grads(state, x, labels)[0]


def shifted_task(w1: np.ndarray, w2: np.ndarray, n: int, seed: int = 0,
                 shift: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(x (n, d), labels (n,)): labels of a teacher = the full-precision base with a rank-1 shift of both layers.

    The NF4 base with LoRA must learn the shift (rank 1, inside LoRA's reach) and live with the rounding.
    """
    n = check_int("n", n, low=1, high=2**20)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    check_finite("shift", shift)
    check_array("w1", w1, ndim=2, finite=True)
    if check_array("w2", w2, ndim=2, finite=True).shape[0] != w1.shape[1]:
        raise ValueError(f"w1 (d, h) and w2 (h, c) must share h; got {w1.shape} and {w2.shape}")
    d, h = w1.shape
    c = w2.shape[1]
    t1 = w1 + shift * np.outer(rng.normal(size=d), rng.normal(size=h)) / np.sqrt(d)
    t2 = w2 + shift * np.outer(rng.normal(size=h), rng.normal(size=c)) / np.sqrt(h)
    x = rng.normal(size=(n, d))
    return x, np.argmax(np.maximum(x @ t1, 0) @ t2, axis=1)


def train_qlora(state: dict, x: np.ndarray, labels: np.ndarray, steps: int, lr: float,
                step=qlora_step) -> tuple[dict, list[float]]:
    """``steps`` full-batch steps of ``step`` (the reference, or a learner's); (final state, loss per step)."""
    check_number("lr", lr, low=0.0, high=10.0)
    if not callable(step):
        raise TypeError(f"step must be a callable (state, x, labels, lr) -> (state, loss); got {step!r:.40}")
    check_int("steps", steps, low=1, high=1_000_000)
    losses = []
    for _ in range(check_int("steps", steps, low=1)):
        state, loss = step(state, x, labels, lr)
        losses.append(float(loss))
    return state, losses
