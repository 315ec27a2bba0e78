"""A residual MLP on the autodiff engine, trained with the floor's optimizers (训练流程).

The model: x (batch, d_in) → stem Linear → n_blocks residual blocks → head Linear → softmax
cross-entropy. Each block is the transformer's feed-forward shape:

    h ← h + tanh(h W1 + b1) W2        W1: (d, e·d), W2: (e·d, d)

A block's backward needs its input h (for dW1) and the tanh output (for tanh' and dW2): (1 + e)·B·d
numbers per block stay on the tape. That is what activation checkpointing trades for recompute.
The optimizers (:class:`~mlsys_lab.nn.SGD`, :class:`~mlsys_lab.nn.Adam`) are the floor's: they update
the Tensors' arrays in place, keyed by :attr:`MLP.named_parameters`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.nn import SGD, Adam
from mlsys_lab.training_memory.autodiff import Tape, Tensor, matmul, softmax_cross_entropy, tanh
from mlsys_lab.validation import (
    check_array,
    check_choice,
    check_finite,
    check_index_array,
    check_int,
    check_number,
    check_sequence,
    check_type,
)

MAX_DIM = 2**20  # any one size (features, width, classes, batch)
MAX_MATRIX_VALUES = 2**26  # one weight or batch matrix: 256 MiB of float32


@dataclass
class MLP:
    """Parameters of the residual MLP, as leaf Tensors (requires_grad, no tape)."""

    stem: tuple[Tensor, Tensor]
    blocks: list[tuple[Tensor, Tensor, Tensor]]
    head: tuple[Tensor, Tensor]
    n_block_forwards: int = 0  # counts block evaluations, so recompute can be counted

    def __post_init__(self) -> None:
        for name, value, size in (("stem", self.stem, 2), ("head", self.head, 2)):
            if len(check_sequence(name, value)) != size or not all(isinstance(p, Tensor) for p in value):
                raise TypeError(f"{name} must be a (weight, bias) pair of Tensors; got {value!r:.60}")
        for block in check_sequence("blocks", self.blocks):
            if not isinstance(block, (tuple, list)) or len(block) != 3 or not all(isinstance(p, Tensor) for p in block):
                raise TypeError(f"blocks must hold (w1, b1, w2) triples of Tensors; got {block!r:.60}")
        check_int("n_block_forwards", self.n_block_forwards, low=0)

    @property
    def parameters(self) -> list[Tensor]:
        return [*self.stem, *(p for block in self.blocks for p in block), *self.head]

    @property
    def named_parameters(self) -> dict[str, Tensor]:
        """Parameters by name, what optimizers key on: ``stem.w``, ``stem.b``, ``blocks.<i>.w1``/``b1``/``w2``,
        ``head.w``, ``head.b``."""
        names = ["stem.w", "stem.b", *(f"blocks.{i}.{n}" for i in range(len(self.blocks)) for n in ("w1", "b1", "w2")),
                 "head.w", "head.b"]
        return dict(zip(names, self.parameters, strict=True))

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

    def logits(self, x):
        """Logits (B, C) of a batch as an array, with no tape anywhere: nothing is recorded."""
        return forward_logits(self, Tensor(x)).data


def make_mlp(d_in: int, width: int, n_blocks: int, n_classes: int, *, expansion: int = 4, seed: int = 0,
             init: str = "scaled", dtype=None) -> MLP:
    """Random weights with std 1/√fan_in (``init="scaled"``), or all zeros (``init="zeros"``: why not).

    All-zero weights are a fixed point of symmetry: every hidden unit computes the same thing and
    receives the same gradient, so they stay equal forever (训练流程 step 1: 不能全 0).
    """
    _check_sizes(d_in, width, n_classes, expansion)
    check_int("n_blocks", n_blocks, low=0, high=1024)
    check_choice("init", init, ("scaled", "zeros"))
    check_int("seed", seed, low=0)
    if dtype is not None and (not isinstance(dtype, (type, np.dtype, str)) or _float_kind(dtype) != "f"):
        raise TypeError(f"dtype must be None or a float dtype (xp.float32, xp.float64); got {dtype!r:.60}")
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


def _check_features(model: MLP, x) -> None:
    """``x`` is a (batch, features) float array of the width ``model``'s stem takes."""
    x = check_array("x", x, ndim=2, kinds="f")
    if x.shape[1] != model.stem[0].data.shape[0]:
        raise ValueError(f"x must have {model.stem[0].data.shape[0]} features (the stem's rows); got shape {x.shape}")


def _check_batch(model: MLP, x, labels) -> None:
    """A model, its (batch, features) input and one integer class label per row, each named when wrong."""
    check_type("model", model, MLP)
    _check_features(model, x)
    n_classes = model.head[0].data.shape[1]
    check_array("labels", labels, kinds="iu", shape=(x.shape[0],))
    if isinstance(labels, np.ndarray):  # a range check of device labels would sync the GPU every step
        check_index_array("labels", labels, n_classes, of_name="n_classes")


def forward_logits(model: MLP, x: Tensor) -> Tensor:
    """Stem, blocks, head: the logits (B, C), recorded on ``x``'s tape if it has one."""
    check_type("model", model, MLP)
    check_type("x", x, Tensor)
    _check_features(model, x.data)
    h = x @ model.stem[0] + model.stem[1]
    for index in range(len(model.blocks)):
        h = model.run_block(index, h)
    return h @ model.head[0] + model.head[1]


def forward_loss(model: MLP, x: Tensor, labels) -> Tensor:
    """Whole model on one tape (no checkpointing): stem, blocks, head, loss."""
    check_type("model", model, MLP)
    check_type("x", x, Tensor)
    _check_batch(model, x.data, labels)
    return softmax_cross_entropy(forward_logits(model, x), labels)


def loss_with_parameter(model: MLP, parameter: Tensor, value, x, labels) -> float:
    """The loss with ``parameter``'s values replaced by ``value`` (restored after), on no tape.

    What central differences perturb: ``numerical_gradient(lambda v: loss_with_parameter(model, w, v, x, y), w0)``.
    """
    check_type("parameter", parameter, Tensor)
    _check_batch(model, x, labels)
    check_array("value", value, kinds="f", shape=tuple(parameter.data.shape))
    saved, parameter.data = parameter.data, xp.asarray(value)
    try:
        return float(forward_loss(model, Tensor(x), labels).data)
    finally:
        parameter.data = saved


def _check_sizes(d_in: int, width: int, n_classes: int, expansion: int) -> None:
    for name, value in (("d_in", d_in), ("width", width), ("n_classes", n_classes), ("expansion", expansion)):
        check_int(name, value, low=1, high=MAX_DIM)
    if max(d_in, expansion * width, n_classes) * width > MAX_MATRIX_VALUES:
        raise ValueError(f"d_in x width, width x expansion*width and width x n_classes must each be at most "
                         f"{MAX_MATRIX_VALUES} values; got d_in={d_in}, width={width}, expansion={expansion}, "
                         f"n_classes={n_classes}")


def _float_kind(dtype) -> str:
    try:
        return np.dtype(dtype).kind
    except TypeError:
        return "?"


def spiral_data(n_per_class: int, n_classes: int = 3, *, noise: float = 0.2, seed: int = 0):
    """The classic interleaved spirals (cs231n): x (n, 2) float32, labels (n,) int. Not linearly separable."""
    check_int("n_per_class", n_per_class, low=1, high=MAX_DIM)
    check_int("n_classes", n_classes, low=2, high=1024)
    check_finite("noise", noise, low=0.0)
    check_int("seed", seed, low=0)
    generator = np.random.default_rng(seed)
    radius = np.tile(np.linspace(0.05, 1.0, n_per_class), n_classes)
    labels = np.repeat(np.arange(n_classes), n_per_class)
    angle = labels * (2 * np.pi / n_classes) + radius * 4.0 + generator.normal(0, noise, radius.size)
    x = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1).astype(np.float32)
    return xp.asarray(x), xp.asarray(labels)


def train_mlp_step(model: MLP, optimizer: SGD | Adam, x, labels) -> Tensor:
    """One step: forward to the loss on a fresh tape, backward, optimizer update. Returns the loss."""
    _check_batch(model, x, labels)
    if not hasattr(optimizer, "step"):
        raise TypeError(f"optimizer must be an SGD or Adam; got {type(optimizer).__name__} {optimizer!r:.40}")
    tape = Tape()
    loss = forward_loss(model, Tensor(x, tape), labels)
    model.zero_grad()
    tape.backward(loss)
    parameters = model.named_parameters
    optimizer.step({name: p.data for name, p in parameters.items()},
                   {name: p.grad for name, p in parameters.items()})
    return loss


def train_mlp(model: MLP, x, labels, *, optimizer: SGD | Adam, batch_size: int, n_epochs: int,
              seed: int = 0) -> list[float]:
    """Mini-batch training; returns the loss of every step.

    ``batch_size = len(x)`` is batch gradient descent (全量梯度下降), 1 is SGD, in between is
    mini-batch SGD. The data are shuffled every epoch.
    """
    _check_batch(model, x, labels)
    if not hasattr(optimizer, "step"):
        raise TypeError(f"optimizer must be an SGD or Adam; got {type(optimizer).__name__} {optimizer!r:.40}")
    check_int("n_epochs", n_epochs, low=1, high=1_000_000)
    check_int("seed", seed, low=0)
    check_type("model", model, MLP)
    n = int(labels.shape[0])
    check_int("batch_size", batch_size, low=1, high=n)
    check_int("n_epochs", n_epochs, low=1)
    generator = np.random.default_rng(seed)
    losses = []
    for _ in range(n_epochs):
        order = xp.asarray(generator.permutation(n))
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            losses.append(float(train_mlp_step(model, optimizer, x[rows], labels[rows]).data))
    return losses


def random_batch(batch: int, d_in: int, n_classes: int, seed: int = 0) -> tuple:
    """x (batch, d_in) float32 standard normal and labels (batch,) uniform in [0, n_classes), drawn on the host."""
    check_int("batch", batch, low=1, high=MAX_DIM)
    check_int("d_in", d_in, low=1, high=MAX_DIM)
    check_int("n_classes", n_classes, low=1, high=MAX_DIM)
    if batch * d_in > MAX_MATRIX_VALUES:
        raise ValueError(f"batch x d_in must be at most {MAX_MATRIX_VALUES} values; got batch={batch}, d_in={d_in}")
    check_int("seed", seed, low=0)
    generator = np.random.default_rng(seed)
    x = xp.asarray(generator.standard_normal((batch, d_in), dtype=np.float32))
    return x, xp.asarray(generator.integers(0, n_classes, batch))


def fresh_adam_steps(d_in: int, width: int, n_blocks: int, n_classes: int, batch: int, *, n_steps: int = 2,
                     lr: float = 1e-3, seed: int = 0) -> tuple[MLP, Adam]:
    """A random batch, a fresh MLP and ``n_steps`` Adam steps on it: a training step's memory from nothing.

    Called under :func:`~mlsys_lab.training_memory.accounting.measure_peak_bytes`, the peak is the
    batch, the weights, Adam's m and v, the gradients, the activations and the step's workspace,
    which :func:`~mlsys_lab.training_memory.accounting.mlp_step_bytes` predicts from shapes. Two
    steps, so that the second runs with Adam's state already allocated.
    """
    check_int("n_steps", n_steps, low=1, high=10**4)
    check_number("lr", lr, low=0.0, high=1.0, low_inclusive=False)  # Adam moves each weight ~lr per step
    _check_sizes(d_in, width, n_classes, 4)  # before the batch is drawn
    x, labels = random_batch(batch, d_in, n_classes, seed)
    model, optimizer = make_mlp(d_in, width, n_blocks, n_classes), Adam(lr=lr)
    for _ in range(n_steps):
        train_mlp_step(model, optimizer, x, labels)
    return model, optimizer
