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
from mlsys_lab.validation import (
    check_array,
    check_finite,
    check_index_array,
    check_int,
    check_number,
    check_positive,
    check_type,
)

Params = dict  # name -> xp array
GELU_C = math.sqrt(2.0 / math.pi)  # √(2/π), the tanh approximation's constant
MAX_LR = 10.0  # an optimizer's largest step size: past it every model here diverges to inf, then NaN


def init_normal(rng: np.random.Generator, shape: int | tuple[int, ...], std: float) -> object:
    """An ``xp`` float32 array of N(0, std²) samples drawn from a NumPy generator (same on both backends)."""
    check_type("rng", rng, np.random.Generator)
    check_finite("std", std, low=0.0)
    sizes = (shape,) if isinstance(shape, int) else check_type("shape", shape, (tuple, list))
    if np.prod([check_int("shape", size, low=0) for size in sizes], dtype=float) > 2**31:
        raise ValueError(f"shape must hold at most 2**31 values; got {tuple(sizes)}")
    return xp.asarray(rng.normal(0.0, std, size=shape).astype(np.float32))


def softmax(logits, axis: int = -1):
    """Numerically stable softmax: exp(z - max z) / Σ exp(z - max z)."""
    if check_array("logits", logits, kinds="fiu").ndim == 0:
        raise ValueError("logits must be an array of at least 1 dimension; got a scalar")
    check_int("axis", axis, low=-logits.ndim, high=logits.ndim - 1)
    shifted = logits - logits.max(axis=axis, keepdims=True)
    e = module_of(logits).exp(shifted)  # NumPy input stays NumPy in a GPU session
    return e / e.sum(axis=axis, keepdims=True)


def cross_entropy(logits, labels) -> tuple[float, object]:
    """Mean cross-entropy of ``logits`` (n, c) against integer ``labels`` (n,), and d loss / d logits.

    The gradient of the mean of −log softmax(z)[y] is (softmax(z) − onehot(y)) / n.
    """
    check_array("logits", logits, ndim=2, kinds="f")
    if check_array("labels", labels, kinds="iu").shape != (logits.shape[0],):
        raise ValueError(f"labels must hold one class per row of logits {logits.shape}; got shape {np.shape(labels)}")
    if isinstance(labels, np.ndarray):  # a range check of device labels would sync the GPU every step
        check_index_array("labels", labels, logits.shape[1], of_name="classes")
    n = logits.shape[0]
    probs = softmax(logits)
    mod = module_of(logits)
    picked = probs[mod.arange(n), labels]
    loss = float(-mod.log(picked + 1e-12).mean())
    grad = probs.copy()
    grad[mod.arange(n), labels] -= 1.0
    return loss, grad / n


def mse_loss(prediction, target) -> tuple[float, object]:
    """L = ½ · mean((ŷ − y)²) over every element, and dL/dŷ = (ŷ − y) / N (N: number of elements).

    The ½ makes the gradient the plain residual over N. It is *not* PyTorch's ``torch.nn.functional.mse_loss``,
    which is mean((ŷ − y)²) without the ½ (its gradient 2(ŷ − y) / N): to compare with PyTorch, double this loss
    and its gradient.

    >>> import numpy as np
    >>> loss, grad = mse_loss(np.array([1.0, 3.0]), np.array([0.0, 0.0]))
    >>> loss, grad.tolist()  # ½ · (1 + 9) / 2; PyTorch's mse_loss gives 5.0
    (2.5, [0.5, 1.5])
    """
    shape = check_array("prediction", prediction, kinds="fiu").shape
    if (got := check_array("target", target, kinds="fiu").shape) != shape:  # broadcasting: a wrong mean
        raise ValueError(f"target must have the shape of prediction {tuple(shape)}; got {tuple(got)}")
    diff = prediction - target
    return float(0.5 * (diff * diff).mean()), diff / diff.size


def gelu(x):
    """GELU, tanh form (Hendrycks & Gimpel 2016): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    _check_elementwise(x)
    return 0.5 * x * (1 + module_of(x).tanh(GELU_C * (x + 0.044715 * x**3)))


def gelu_grad(x):
    """d gelu / dx of the tanh form: 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²), t the tanh."""
    _check_elementwise(x)
    t = module_of(x).tanh(GELU_C * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x**2)


def _check_elementwise(x) -> None:
    """An elementwise function's input: a number or an array of numbers (dtype checked, values not: cheap)."""
    if isinstance(x, bool) or not (isinstance(x, (int, float)) or getattr(x, "dtype", None) is not None):
        raise TypeError(f"x must be a number or an array of numbers; got {type(x).__name__} {x!r:.40}")
    if getattr(x, "dtype", None) is not None and x.dtype.kind not in "fiu":
        raise TypeError(f"x must be an array of numbers; got dtype {x.dtype}")


def accuracy(logits, labels) -> float:
    """Fraction of rows whose largest logit is the label."""
    check_array("logits", logits, ndim=(1, 2), kinds="fiu")
    if (shape := check_array("labels", labels, kinds="iu", min_size=0).shape) != logits.shape[:-1]:
        raise ValueError(f"labels must have shape {logits.shape[:-1]}, one per row of logits; got {shape}")
    return float((logits.argmax(axis=-1) == labels).mean())


# --- optimizers (梯度下降): step(params, grads) updates the parameter arrays in place -------------

@dataclass
class SGD:
    """θ ← θ − η·g. No state."""

    lr: float = 0.1
    trainable: tuple[str, ...] | None = None  # None: every name in ``grads``

    def __post_init__(self) -> None:
        check_number("lr", self.lr, low=0.0, high=MAX_LR, low_inclusive=False)
        _check_trainable(self.trainable)

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
        check_number("lr", self.lr, low=0.0, high=MAX_LR, low_inclusive=False)
        _check_trainable(self.trainable)
        for name in ("beta1", "beta2"):
            check_number(name, getattr(self, name), low=0.0, high=1.0, high_inclusive=False)
        check_positive("eps", self.eps)
        check_int("step_count", self.step_count, low=0)
        check_type("m", self.m, dict)
        check_type("v", self.v, dict)

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


def _check_trainable(trainable) -> None:
    if trainable is not None and (not isinstance(trainable, (tuple, list))
                                  or not all(isinstance(name, str) for name in trainable)):
        raise TypeError(f"trainable must be None or a tuple of parameter names; got {trainable!r:.60}")


def n_values(params: Params, names) -> int:
    """How many numbers the named parameters hold."""
    check_type("params", params, dict)
    if isinstance(names, str) or not hasattr(names, "__iter__") or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be parameter names (a tuple, or the params dict); got {names!r:.40}")
    missing = [name for name in names if name not in params]
    if missing:
        raise ValueError(f"names must name parameters of params; {missing!r:.60} are not there")
    return sum(int(params[name].size) for name in names)


def batches(n_items: int, batch_size: int, rng: np.random.Generator):
    """Yield index arrays of one shuffled epoch, ``batch_size`` at a time (last partial batch dropped)."""
    check_int("n_items", n_items, low=1, high=2**31)
    check_int("batch_size", batch_size, low=1, high=n_items)
    check_type("rng", rng, np.random.Generator)
    return _epoch(rng.permutation(n_items), batch_size)  # checked now, not at the first next()


def _epoch(order, batch_size: int):
    for start in range(0, order.size - batch_size + 1, batch_size):
        yield order[start:start + batch_size]
