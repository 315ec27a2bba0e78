"""A residual MLP on the autodiff engine, and the optimizers that train it (训练流程).

The model: x (batch, d_in) → stem Linear → n_blocks residual blocks → head Linear → softmax
cross-entropy. Each block is the transformer's feed-forward shape:

    h ← h + tanh(h W1 + b1) W2        W1: (d, e·d), W2: (e·d, d)

A block's backward needs its input h (for dW1) and the tanh output (for tanh' and dW2): (1 + e)·B·d
numbers per block stay on the tape. That is what activation checkpointing trades for recompute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.training_memory.autodiff import Tape, Tensor, matmul, softmax_cross_entropy, tanh
from mlsys_lab.validation import check_choice, check_int, check_number


@dataclass
class MLP:
    """Parameters of the residual MLP, as leaf Tensors (requires_grad, no tape)."""

    stem: tuple[Tensor, Tensor]
    blocks: list[tuple[Tensor, Tensor, Tensor]]
    head: tuple[Tensor, Tensor]
    n_block_forwards: int = 0  # counts block evaluations, so recompute can be counted

    @property
    def parameters(self) -> list[Tensor]:
        return [*self.stem, *(p for block in self.blocks for p in block), *self.head]

    @property
    def n_params(self) -> int:
        return sum(int(p.data.size) for p in self.parameters)

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None

    def run_block(self, index: int, h: Tensor) -> Tensor:
        """One residual block: h + tanh(h W1 + b1) W2. Shapes: (B, d) → (B, d)."""
        w1, b1, w2 = self.blocks[index]
        self.n_block_forwards += 1
        return h + matmul(tanh(h @ w1 + b1), w2)


def make_mlp(d_in: int, width: int, n_blocks: int, n_classes: int, *, expansion: int = 4, seed: int = 0,
             init: str = "scaled", dtype=None) -> MLP:
    """Random weights with std 1/√fan_in (``init="scaled"``), or all zeros (``init="zeros"``: why not).

    All-zero weights are a fixed point of symmetry: every hidden unit computes the same thing and
    receives the same gradient, so they stay equal forever (训练流程 step 1: 不能全 0).
    """
    for name, value in (("d_in", d_in), ("width", width), ("n_classes", n_classes), ("expansion", expansion)):
        check_int(name, value, low=1)
    check_int("n_blocks", n_blocks, low=0)
    check_choice("init", init, ("scaled", "zeros"))
    dtype = dtype or xp.float32
    generator = np.random.default_rng(seed)  # drawn on the host: the same model on NumPy and CuPy

    def weight(fan_in: int, fan_out: int, scale: float = 1.0) -> Tensor:
        if init == "zeros":
            data = xp.zeros((fan_in, fan_out), dtype=dtype)
        else:
            values = generator.standard_normal((fan_in, fan_out)) * (scale / math.sqrt(fan_in))
            data = xp.asarray(values, dtype=dtype)
        return Tensor(data, requires_grad=True)

    def bias(n: int) -> Tensor:
        return Tensor(xp.zeros(n, dtype=dtype), requires_grad=True)

    hidden = expansion * width
    # The second matmul of a block is scaled down so the residual stream grows slowly with depth.
    blocks = [(weight(width, hidden), bias(hidden), weight(hidden, width, 1.0 / math.sqrt(max(n_blocks, 1))))
              for _ in range(n_blocks)]
    return MLP((weight(d_in, width), bias(width)), blocks, (weight(width, n_classes), bias(n_classes)))


def forward_loss(model: MLP, x: Tensor, labels) -> Tensor:
    """Whole model on one tape (no checkpointing): stem, blocks, head, loss."""
    h = x @ model.stem[0] + model.stem[1]
    for index in range(len(model.blocks)):
        h = model.run_block(index, h)
    return softmax_cross_entropy(h @ model.head[0] + model.head[1], labels)


def accuracy(model: MLP, x, labels) -> float:
    """Fraction of rows whose largest logit is the label (no tape)."""
    h = Tensor(x) @ model.stem[0] + model.stem[1]  # no tape anywhere: nothing is recorded
    for index in range(len(model.blocks)):
        h = model.run_block(index, h)
    logits = (h @ model.head[0] + model.head[1]).data
    return float((logits.argmax(axis=1) == labels).mean())


# --- optimizers (梯度下降): each keeps its state as arrays, so the state's bytes can be counted ---

@dataclass
class SGD:
    """θ ← θ − η·g. No state."""

    lr: float = 0.1
    state: dict = field(default_factory=dict)

    def step(self, params: list[Tensor]) -> None:
        for p in params:
            p.data -= self.lr * p.grad


@dataclass
class Adam:
    """Adam (Kingma & Ba 2015): per-parameter step size from running moments of the gradient.

        m ← β1·m + (1−β1)·g          first moment: the recent direction (一阶矩, "方向趋势")
        v ← β2·v + (1−β2)·g²         second moment: the recent magnitude (二阶矩, "波动幅度")
        θ ← θ − η · m̂ / (√v̂ + ε)     m̂, v̂: m, v divided by (1 − βᵗ) to undo the zero start

    m and v have the parameter's shape: 2 × the model's size of state, kept for the whole run.
    """

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    state: dict = field(default_factory=dict)  # id(param) -> (m, v)

    def step(self, params: list[Tensor]) -> None:
        self.t += 1
        correction1, correction2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        for p in params:
            if id(p) not in self.state:
                self.state[id(p)] = (xp.zeros_like(p.data), xp.zeros_like(p.data))
            m, v = self.state[id(p)]
            # In place with one scratch array of the parameter's size (what fused optimizers avoid too).
            scratch = p.grad * p.grad
            v *= self.beta2
            scratch *= 1 - self.beta2
            v += scratch
            m *= self.beta1
            xp.multiply(p.grad, 1 - self.beta1, out=scratch)
            m += scratch
            xp.divide(v, correction2, out=scratch)
            xp.sqrt(scratch, out=scratch)
            scratch += self.eps
            xp.divide(m, scratch, out=scratch)
            scratch *= self.lr / correction1
            p.data -= scratch

    @property
    def state_bytes(self) -> int:
        return sum(int(m.nbytes + v.nbytes) for m, v in self.state.values())


def make_optimizer(name: str, lr: float):
    """'sgd' or 'adam' with learning rate ``lr``."""
    check_choice("optimizer", name, ("sgd", "adam"))
    check_number("lr", lr, low=0.0, low_inclusive=False)
    return SGD(lr) if name == "sgd" else Adam(lr)


def spiral_data(n_per_class: int, n_classes: int = 3, *, noise: float = 0.2, seed: int = 0):
    """The classic interleaved spirals (cs231n): x (n, 2) float32, labels (n,) int. Not linearly separable."""
    check_int("n_per_class", n_per_class, low=1)
    check_int("n_classes", n_classes, low=2)
    generator = np.random.default_rng(seed)
    radius = np.tile(np.linspace(0.05, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    angle = labels * (2 * np.pi / n_classes) + radius * 4.0 + generator.normal(0, noise, radius.size)
    x = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1).astype(np.float32)
    return xp.asarray(x), xp.asarray(labels)


def train_step(model: MLP, optimizer, x, labels) -> Tensor:
    """One step: forward to the loss on a fresh tape, backward, optimizer update. Returns the loss."""
    tape = Tape()
    loss = forward_loss(model, Tensor(x, tape), labels)
    model.zero_grad()
    tape.backward(loss)
    optimizer.step(model.parameters)
    return loss


def train(model: MLP, x, labels, *, optimizer, batch_size: int, n_epochs: int, seed: int = 0) -> list[float]:
    """Mini-batch training; returns the loss of every step.

    ``batch_size = len(x)`` is batch gradient descent (全量梯度下降), 1 is SGD, in between is
    mini-batch SGD. The data are shuffled every epoch.
    """
    n = int(labels.shape[0])
    check_int("batch_size", batch_size, low=1, high=n)
    check_int("n_epochs", n_epochs, low=1)
    generator = np.random.default_rng(seed)
    losses = []
    for _ in range(n_epochs):
        order = xp.asarray(generator.permutation(n))
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            losses.append(float(train_step(model, optimizer, x[rows], labels[rows]).data))
    return losses
