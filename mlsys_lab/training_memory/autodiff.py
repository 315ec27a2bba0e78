"""A small reverse-mode automatic differentiation engine over ``xp`` arrays (NumPy or CuPy).

Reverse mode (反向模式): run the forward pass once, record on a *tape* every operation together with
the arrays its backward will need, then walk the tape from the loss backwards applying the chain rule.
One backward pass gives dL/dθ for every parameter θ; forward mode would need one pass per input.

The tape's memory is the point of the lesson: every array an operation keeps for its backward
(its input for ``matmul``, its output for ``tanh``) stays alive until the backward pass reaches that
operation. :class:`Tape` counts those bytes (each array once, however many operations keep it) and
remembers the peak, so the growth with depth and the saving of checkpointing can be measured.

The operations (``matmul``, ``add``, ``sub``, ``mul`` with broadcasting on either side, ``exponential``,
``logarithm``, ``sum_over``, ``pick``, ``tanh``, ``relu``, ``mse_loss``, the fused ``softmax_cross_entropy``
and the same loss composed of primitives, ``composed_softmax_cross_entropy``) take and return
:class:`Tensor` objects and record their backward; ``matmul``, ``tanh``, ``relu``, ``mse_loss`` share their
names with lesson 01's traced operators (:mod:`mlsys_lab.operators.functional`) and the floor's array
functions (:mod:`mlsys_lab.nn`) on purpose: the same mathematics, in the engine that differentiates it.

    tape = Tape()
    x = Tensor(xp.ones((4, 3)), tape)              # an input
    w = Tensor(xp.ones((3, 2)), requires_grad=True)  # a parameter (a leaf)
    loss = mse_loss(tanh(x @ w), xp.zeros((4, 2)))
    tape.backward(loss)                            # w.grad now holds dloss/dw, shape (3, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mlsys_lab import nn
from mlsys_lab.backend import xp
from mlsys_lab.validation import check_array, check_bool, check_finite, check_index_array, check_int


class Tensor:
    """An array, its gradient, and the tape (or None) that records operations on it.

    ``requires_grad`` marks parameters and anything computed from them (as in PyTorch); only those
    get gradients, so the first layer does not waste a matmul on d(loss)/d(input data).
    """

    __slots__ = ("data", "grad", "tape", "requires_grad", "recorded")

    def __init__(self, data, tape: Tape | None = None, requires_grad: bool = False) -> None:
        self.data = data
        self.grad = None
        self.tape = tape
        self.requires_grad = requires_grad
        self.recorded = False  # True when an operation on a tape produced it (not a leaf)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def __add__(self, other: Tensor) -> Tensor:
        return add(self, other)

    def __sub__(self, other: Tensor) -> Tensor:
        return sub(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return mul(self, other)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, requires_grad={self.requires_grad})"


@dataclass
class _Node:
    # Keys, not Tensors: holding the Tensors would keep every intermediate array alive, saved or not.
    output_key: int
    parent_keys: tuple[int, ...]
    needs: tuple[bool, ...]  # which parents want a gradient
    backward: Callable  # (grad_output, needs) -> one gradient (or None) per parent
    saved: tuple  # arrays kept alive for the backward


@dataclass
class Tape:
    """Records operations; counts the bytes kept for backward (live and peak) and the ops run."""

    nodes: list[_Node] = field(default_factory=list)
    saved_bytes: int = 0
    peak_saved_bytes: int = 0
    n_ops_recorded: int = 0
    _refcount: dict[int, int] = field(default_factory=dict)
    _leaves: dict[int, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, kind in (("nodes", list), ("_refcount", dict), ("_leaves", dict)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}; got {type(getattr(self, name)).__name__}")
        if not all(isinstance(node, _Node) for node in self.nodes):
            raise TypeError("nodes must hold the tape's recorded operations (_Node), nothing else")
        for name in ("saved_bytes", "peak_saved_bytes", "n_ops_recorded"):
            check_int(name, getattr(self, name), low=0)

    def record(self, output: Tensor, parents: tuple[Tensor, ...], backward: Callable, saved: tuple) -> None:
        """Append one operation; ``saved`` are the arrays its backward reads (each counted once)."""
        for array in saved:
            key = id(array)
            if key not in self._refcount:
                self.saved_bytes += int(array.nbytes)
            self._refcount[key] = self._refcount.get(key, 0) + 1
        self.peak_saved_bytes = max(self.peak_saved_bytes, self.saved_bytes)
        self.n_ops_recorded += 1
        for parent in parents:
            if parent.requires_grad and not parent.recorded:
                self._leaves[id(parent)] = parent  # a parameter or a checkpoint's input
        output.recorded = True
        self.nodes.append(_Node(id(output), tuple(id(p) for p in parents),
                                tuple(p.requires_grad for p in parents), backward, saved))

    def _release(self, node: _Node) -> None:
        for array in node.saved:
            key = id(array)
            self._refcount[key] -= 1
            if self._refcount[key] == 0:
                del self._refcount[key]
                self.saved_bytes -= int(array.nbytes)

    def backward(self, output: Tensor, grad_output=None) -> None:
        """Chain rule from ``output`` back to the leaves, freeing each node's saved arrays on the way.

        ``grad_output`` defaults to ones (``output`` is the scalar loss). Leaves that require grad
        *accumulate* into ``.grad``: a parameter used twice gets the sum, as the chain rule says.
        """
        grads = {id(output): xp.ones_like(output.data) if grad_output is None else grad_output}
        while self.nodes:
            node = self.nodes.pop()
            grad = grads.pop(node.output_key, None)
            if grad is not None:
                parent_grads = node.backward(grad, node.needs)
                for key, need, parent_grad in zip(node.parent_keys, node.needs, parent_grads, strict=True):
                    if need and parent_grad is not None:
                        grads[key] = parent_grad if key not in grads else grads[key] + parent_grad
            self._release(node)
        for key, leaf in self._leaves.items():
            if key in grads:
                leaf.grad = grads[key] if leaf.grad is None else leaf.grad + grads[key]
        self._leaves.clear()


def _make(data, parents: tuple[Tensor, ...], backward: Callable, saved: tuple) -> Tensor:
    """Wrap an op's result; record it only if a parent needs a gradient and sits on a tape."""
    tape = next((p.tape for p in parents if p.tape is not None), None)
    requires_grad = any(p.requires_grad for p in parents)
    out = Tensor(data, tape, requires_grad)
    if tape is not None and requires_grad:
        tape.record(out, parents, backward, saved)
    return out


# --- operations: forward computes, the closure is the local chain rule (vector-Jacobian product) ---

def matmul(a: Tensor, b: Tensor) -> Tensor:
    """(m, k) @ (k, n) -> (m, n). Backward: dA = dC @ Bᵀ, dB = Aᵀ @ dC (2 matmuls: backward ≈ 2× forward)."""
    _check_tensors(a=a, b=b)
    a_data, b_data = a.data, b.data

    def backward(grad, needs):
        return (grad @ b_data.T if needs[0] else None, a_data.T @ grad if needs[1] else None)

    saved = tuple(t.data for t in (a, b) if not _is_parameter(t))  # parameters are counted as weights
    return _make(a_data @ b_data, (a, b), backward, saved)


def _unbroadcast(grad, shape: tuple[int, ...]):
    """Sum ``grad`` down to ``shape``: over the leading axes broadcasting added and the axes of size 1 it
    stretched (NumPy's rules). The gradient of a broadcast operand is the sum over the copies it made."""
    if tuple(grad.shape) == shape:
        return grad
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape)))) if grad.ndim > len(shape) else grad
    stretched = tuple(axis for axis, size in enumerate(shape) if size == 1 and grad.shape[axis] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise a + b, either side broadcast (a bias of shape (n,) in ``x + bias`` or ``bias + x``).

    Backward: each operand gets the upstream gradient summed down to its own shape. Keeps nothing (the
    shapes are captured as tuples: a closure holding a or b would keep their arrays alive).
    """
    _check_tensors(a=a, b=b)
    a_shape, b_shape = tuple(a.data.shape), tuple(b.data.shape)

    def backward(grad, needs):
        return (_unbroadcast(grad, a_shape) if needs[0] else None, _unbroadcast(grad, b_shape) if needs[1] else None)

    return _make(a.data + b.data, (a, b), backward, ())


def sub(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise a − b, either side broadcast. Backward: da = g, db = −g, each summed to its shape."""
    _check_tensors(a=a, b=b)
    a_shape, b_shape = tuple(a.data.shape), tuple(b.data.shape)

    def backward(grad, needs):
        return (_unbroadcast(grad, a_shape) if needs[0] else None, -_unbroadcast(grad, b_shape) if needs[1] else None)

    return _make(a.data - b.data, (a, b), backward, ())


def mul(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise a · b, either side broadcast. Backward: da = g·b, db = g·a (each keeps the other)."""
    _check_tensors(a=a, b=b)
    a_data, b_data = a.data, b.data
    a_shape, b_shape = tuple(a_data.shape), tuple(b_data.shape)

    def backward(grad, needs):
        return (_unbroadcast(grad * b_data, a_shape) if needs[0] else None,
                _unbroadcast(grad * a_data, b_shape) if needs[1] else None)

    saved = tuple(t.data for t, other in ((a, b), (b, a)) if other.requires_grad and not _is_parameter(t))
    return _make(a_data * b_data, (a, b), backward, saved)


def exponential(a: Tensor) -> Tensor:
    """y = eˣ. Backward: dx = dy · y, so the output is kept."""
    _check_tensors(a=a)
    out = xp.exp(a.data)

    def backward(grad, needs):
        return (grad * out,)

    return _make(out, (a,), backward, (out,))


def logarithm(a: Tensor) -> Tensor:
    """y = ln x. Backward: dx = dy / x, so the input is kept."""
    _check_tensors(a=a)
    a_data = a.data

    def backward(grad, needs):
        return (grad / a_data,)

    return _make(xp.log(a_data), (a,), backward, (a_data,))


def sum_over(a: Tensor, axis: int, keepdims: bool = False) -> Tensor:
    """Sum over one axis. Backward: the upstream gradient copied back along that axis. Keeps nothing."""
    _check_tensors(a=a)
    check_int("axis", axis, low=-a.data.ndim, high=a.data.ndim - 1)
    check_bool("keepdims", keepdims)
    shape = tuple(a.data.shape)

    def backward(grad, needs):
        grad = grad if keepdims else xp.expand_dims(grad, axis)
        return (xp.broadcast_to(grad, shape),)

    return _make(a.data.sum(axis=axis, keepdims=keepdims), (a,), backward, ())


def pick(a: Tensor, labels) -> Tensor:
    """Row i's entry at column labels[i]: (batch, classes) -> (batch,). Backward: the gradient scattered back."""
    _check_tensors(a=a)
    if a.data.ndim == 2:
        _check_labels(labels, a)
    if a.data.ndim != 2 or tuple(getattr(labels, "shape", ())) != (a.data.shape[0],):
        raise ValueError(f"pick needs a (batch, classes) tensor and labels of shape (batch,); got {a.shape} and "
                         f"labels of shape {tuple(getattr(labels, 'shape', ()))}")
    shape, rows = tuple(a.data.shape), xp.arange(a.data.shape[0])

    def backward(grad, needs):
        out = xp.zeros(shape, dtype=grad.dtype)
        out[rows, labels] = grad
        return (out,)

    return _make(a.data[rows, labels], (a,), backward, ())


def tanh(a: Tensor) -> Tensor:
    """y = tanh(x). Backward: dx = dy · (1 − y²), so the *output* y is kept."""
    _check_tensors(a=a)
    out = xp.tanh(a.data)

    def backward(grad, needs):
        local = out * out  # 1 − y², formed in place: one temporary array instead of three
        xp.subtract(1.0, local, out=local)
        local *= grad
        return (local,)

    return _make(out, (a,), backward, (out,))


def relu(a: Tensor) -> Tensor:
    """y = max(x, 0). Backward: dx = dy · [x > 0], so a boolean mask (1 byte/element) is kept."""
    _check_tensors(a=a)
    mask = a.data > 0
    out = a.data * mask

    def backward(grad, needs):
        return (grad * mask,)

    return _make(out, (a,), backward, (mask,))


def mse_loss(prediction: Tensor, target) -> Tensor:
    """L = ½ · mean((ŷ − y)²), the floor's :func:`mlsys_lab.nn.mse_loss` on the tape.

    Backward: dŷ = (ŷ − y) / N, computed in the forward and kept (one array of ŷ's size).
    """
    _check_tensors(prediction=prediction)
    value, local_grad = nn.mse_loss(prediction.data, target)

    def backward(grad, needs):
        return (grad * local_grad,)

    return _make(xp.asarray(value, dtype=local_grad.dtype), (prediction,), backward, (local_grad,))


def softmax_cross_entropy(logits: Tensor, labels) -> Tensor:
    """L = mean over rows of −log softmax(z)[label]; logits (batch, classes), labels (batch,) ints.

    Backward: dz = (softmax(z) − onehot(label)) / batch. Keeps the probabilities.
    """
    _check_tensors(logits=logits)
    _check_labels(labels, logits)
    shifted = logits.data - logits.data.max(axis=1, keepdims=True)
    log_z = xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    log_probs = shifted - log_z
    rows = xp.arange(labels.shape[0])
    probs = xp.exp(log_probs)

    def backward(grad, needs):
        dz = probs.copy()
        dz[rows, labels] -= 1.0
        return (grad * dz / labels.shape[0],)

    return _make(-log_probs[rows, labels].mean(), (logits,), backward, (probs,))


def _check_labels(labels, logits: Tensor) -> None:
    """One integer class per row of a (batch, classes) tensor: ValueError/TypeError naming ``labels``."""
    shape = tuple(logits.data.shape)
    if len(shape) != 2:
        raise ValueError(f"logits must be a (batch, classes) tensor; got shape {shape}")
    check_array("labels", labels, kinds="iu", shape=(shape[0],))
    if isinstance(labels, np.ndarray):  # a range check of device labels would sync the GPU every step
        check_index_array("labels", labels, shape[1], of_name="classes")


def _check_tensors(**operands) -> None:
    """Each operand must be a Tensor (an array goes in ``Tensor(x)`` first): TypeError naming it. Cheap: isinstance."""
    for name, value in operands.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a Tensor (wrap an array as Tensor(x)); got {type(value).__name__}")


def _is_parameter(tensor: Tensor) -> bool:
    """A leaf that requires grad and lives outside any tape: a weight, counted as weights not activations."""
    return tensor.requires_grad and tensor.tape is None


def composed_softmax_cross_entropy(logits: Tensor, labels, label_smoothing: float = 0.0) -> Tensor:
    """Per-row loss −Σ_j q_j · log softmax(z)_j, built from the primitive operations (each records its own VJP).

    q = (1 − ε)·onehot(label) + ε/C (label smoothing ε, as PyTorch's ``CrossEntropyLoss(label_smoothing=ε)``;
    ε = 0 is plain cross-entropy). log softmax(z) = z − LSE(z) with the stable LSE(z) = m + log Σ exp(z − m),
    m = the row's max taken as a constant (LSE does not depend on it, so no gradient flows through it).
    logits (batch, classes), labels (batch,) ints; returns (batch,). The reverse pass through this graph is
    what a fused operator's hand-written VJP, (softmax(z) − q) · g, must reproduce; the graph keeps exp(z − m)
    and Σ exp for its backward, the fused operator only the probabilities.
    """
    _check_tensors(logits=logits)
    _check_labels(labels, logits)
    check_finite("label_smoothing", label_smoothing, low=0.0)
    if label_smoothing >= 1:
        raise ValueError(f"label_smoothing must be in [0, 1); got {label_smoothing}")
    data = logits.data
    n_classes = int(data.shape[1])
    row_max = Tensor(data.max(axis=1, keepdims=True))  # a constant: no tape, no gradient
    lse = add(logarithm(sum_over(exponential(sub(logits, row_max)), axis=1, keepdims=True)), row_max)
    log_probs = sub(logits, lse)  # (batch, classes) − (batch, 1)
    nll = pick(log_probs, labels)  # (batch,)
    loss = mul(nll, Tensor(xp.asarray(-(1.0 - label_smoothing), dtype=data.dtype)))
    if label_smoothing:
        spread = mul(sum_over(log_probs, axis=1), Tensor(xp.asarray(-label_smoothing / n_classes, dtype=data.dtype)))
        loss = add(loss, spread)
    return loss
