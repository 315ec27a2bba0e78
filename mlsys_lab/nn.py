"""The small network toolkit the training lessons build on, written out by hand: initial values, softmax,
losses with their gradients, GELU, accuracy, mini-batches, and the two optimizers SGD and Adam.

Parameters live in a ``dict[str, array]`` of ``xp`` arrays (NumPy on CPU, CuPy on GPU). Gradients
are a dict with the same keys. Initial values come from a NumPy generator and are then moved to
``xp``, so a seed gives the same starting model on both backends. The optimizers update the
parameter arrays in place, so a model that holds those arrays elsewhere (lesson 06's autodiff
Tensors) sees the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mlsys_lab.backend import module_of, xp
from mlsys_lab.validation import check_int, check_positive

Params = dict  # name -> xp array
GELU_C = math.sqrt(2.0 / math.pi)  # √(2/π), the tanh approximation's constant


def init_normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> object:
    """An ``xp`` float32 array of N(0, std²) samples drawn from a NumPy generator (same on both backends)."""
    return xp.asarray(rng.normal(0.0, std, size=shape).astype(np.float32))


def softmax(logits, axis: int = -1):
    """Numerically stable softmax: exp(z - max z) / Σ exp(z - max z)."""
    shifted = logits - logits.max(axis=axis, keepdims=True)
    e = module_of(logits).exp(shifted)  # NumPy input stays NumPy in a GPU session
    return e / e.sum(axis=axis, keepdims=True)


def cross_entropy(logits, labels) -> tuple[float, object]:
    """Mean cross-entropy of ``logits`` (n, c) against integer ``labels`` (n,), and d loss / d logits.

    The gradient of the mean of −log softmax(z)[y] is (softmax(z) − onehot(y)) / n.
    """
    n = logits.shape[0]
    probs = softmax(logits)
    mod = module_of(logits)
    picked = probs[mod.arange(n), labels]
    loss = float(-mod.log(picked + 1e-12).mean())
    grad = probs.copy()
    grad[mod.arange(n), labels] -= 1.0
    return loss, grad / n


def mse_loss(prediction, target) -> tuple[float, object]:
    """L = ½ · mean((ŷ − y)²) over every element, and dL/dŷ = (ŷ − y) / N (N: number of elements)."""
    diff = prediction - target
    return float(0.5 * (diff * diff).mean()), diff / diff.size


def gelu(x):
    """GELU, tanh form (Hendrycks & Gimpel 2016): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1 + module_of(x).tanh(GELU_C * (x + 0.044715 * x**3)))


def gelu_grad(x):
    """d gelu / dx of the tanh form: 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²), t the tanh."""
    t = module_of(x).tanh(GELU_C * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x**2)


def accuracy(logits, labels) -> float:
    """Fraction of rows whose largest logit is the label."""
    return float((logits.argmax(axis=-1) == labels).mean())


# --- optimizers (梯度下降): step(params, grads) updates the parameter arrays in place -------------

@dataclass
class SGD:
    """θ ← θ − η·g. No state."""

    lr: float = 0.1
    trainable: tuple[str, ...] | None = None  # None: every name in ``grads``

    def step(self, params: Params, grads: Params) -> None:
        for name in self.trainable or tuple(grads):
            params[name] -= self.lr * grads[name]

    @property
    def state_bytes(self) -> int:
        return 0


@dataclass
class Adam:
    """Adam (Kingma & Ba 2015): per-parameter step size from running moments of the gradient.

        m ← β1·m + (1−β1)·g          first moment: the recent direction (一阶矩, "方向趋势")
        v ← β2·v + (1−β2)·g²         second moment: the recent magnitude (二阶矩, "波动幅度")
        θ ← θ − η · m̂ / (√v̂ + ε)     m̂, v̂: m, v divided by (1 − βᵗ) to undo the zero start

    It keeps m and v, of each parameter's shape, for the whole run: two fp32 moments per trainable
    value, 2 × the model's size of state, which is the optimizer memory fine-tuning saves. The
    update runs in place with one scratch array of the parameter's size (fused optimizers avoid
    even that), so a step's memory is the state plus that one array.
    """

    trainable: tuple[str, ...] | None = None  # None: every name in ``grads``
    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    step_count: int = 0  # t in the paper: the bias correction reads it
    m: dict = field(default_factory=dict)
    v: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_positive("lr", self.lr)

    def step(self, params: Params, grads: Params) -> None:
        self.step_count += 1
        correction1, correction2 = 1 - self.beta1 ** self.step_count, 1 - self.beta2 ** self.step_count
        for name in self.trainable or tuple(grads):
            p, g = params[name], grads[name]
            if name not in self.m:
                self.m[name], self.v[name] = xp.zeros_like(p), xp.zeros_like(p)
            m, v = self.m[name], self.v[name]
            scratch = g * g
            v *= self.beta2
            scratch *= 1 - self.beta2
            v += scratch
            m *= self.beta1
            xp.multiply(g, 1 - self.beta1, out=scratch)
            m += scratch
            xp.divide(v, correction2, out=scratch)
            xp.sqrt(scratch, out=scratch)
            scratch += self.eps
            xp.divide(m, scratch, out=scratch)
            scratch *= self.lr / correction1
            p -= scratch

    @property
    def state_bytes(self) -> int:
        """Bytes of optimizer state held now: m and v of every parameter stepped so far."""
        return sum(int(self.m[name].nbytes + self.v[name].nbytes) for name in self.m)


def n_values(params: Params, names) -> int:
    """How many numbers the named parameters hold."""
    return sum(int(params[name].size) for name in names)


def batches(n_items: int, batch_size: int, rng: np.random.Generator):
    """Yield index arrays of one shuffled epoch, ``batch_size`` at a time (last partial batch dropped)."""
    check_int("batch_size", batch_size, low=1, high=n_items)
    order = rng.permutation(n_items)
    for start in range(0, n_items - batch_size + 1, batch_size):
        yield order[start:start + batch_size]
