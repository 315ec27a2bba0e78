"""The small pieces the fine-tuning and mixture-of-experts lessons train with, written out by hand.

Parameters live in a ``dict[str, array]`` of ``xp`` arrays (NumPy on CPU, CuPy on GPU). Gradients
are a dict with the same keys. Initial values come from a NumPy generator and are then moved to
``xp``, so a seed gives the same starting model on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.validation import check_int, check_positive

Params = dict  # name -> xp array


def init_normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> object:
    """An ``xp`` float32 array of N(0, std²) samples drawn from a NumPy generator (same on both backends)."""
    return xp.asarray(rng.normal(0.0, std, size=shape).astype(np.float32))


def softmax(logits, axis: int = -1):
    """Numerically stable softmax: exp(z - max z) / Σ exp(z - max z)."""
    shifted = logits - logits.max(axis=axis, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def cross_entropy(logits, labels) -> tuple[float, object]:
    """Mean cross-entropy of ``logits`` (n, c) against integer ``labels`` (n,), and d loss / d logits.

    The gradient of the mean of −log softmax(z)[y] is (softmax(z) − onehot(y)) / n.
    """
    n = logits.shape[0]
    probs = softmax(logits)
    picked = probs[xp.arange(n), labels]
    loss = float(-xp.log(picked + 1e-12).mean())
    grad = probs.copy()
    grad[xp.arange(n), labels] -= 1.0
    return loss, grad / n


def accuracy(logits, labels) -> float:
    """Fraction of rows whose largest logit is the label."""
    return float((logits.argmax(axis=-1) == labels).mean())


@dataclass
class Adam:
    """Adam (Kingma & Ba 2015) over the ``trainable`` names of a parameter dict.

    m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  p ← p − lr · m̂ / (√v̂ + ε) with bias-corrected m̂, v̂.
    It keeps two fp32 moments per trainable value: that is the optimizer memory fine-tuning saves.
    """

    trainable: tuple[str, ...]
    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    step_count: int = 0
    m: dict = field(default_factory=dict)
    v: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_positive("lr", self.lr)

    def step(self, params: Params, grads: Params) -> None:
        self.step_count += 1
        t = self.step_count
        for name in self.trainable:
            g = grads[name]
            if name not in self.m:
                self.m[name], self.v[name] = xp.zeros_like(g), xp.zeros_like(g)
            self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * g
            self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * g * g
            m_hat = self.m[name] / (1 - self.beta1**t)
            v_hat = self.v[name] / (1 - self.beta2**t)
            params[name] -= self.lr * m_hat / (xp.sqrt(v_hat) + self.eps)

    def state_bytes(self, params: Params) -> int:
        """Bytes of optimizer state: two moments of each trainable parameter."""
        return 2 * sum(int(params[name].size) * params[name].itemsize for name in self.trainable)


def n_values(params: Params, names) -> int:
    """How many numbers the named parameters hold."""
    return sum(int(params[name].size) for name in names)


def batches(n_items: int, batch_size: int, rng: np.random.Generator):
    """Yield index arrays of one shuffled epoch, ``batch_size`` at a time (last partial batch dropped)."""
    check_int("batch_size", batch_size, low=1, high=n_items)
    order = rng.permutation(n_items)
    for start in range(0, n_items - batch_size + 1, batch_size):
        yield order[start:start + batch_size]
