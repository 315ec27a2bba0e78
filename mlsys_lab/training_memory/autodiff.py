"""A small reverse-mode automatic differentiation engine over ``xp`` arrays (NumPy or CuPy).

Reverse mode (反向模式): run the forward pass once, record on a *tape* every operation together with
the arrays its backward will need, then walk the tape from the loss backwards applying the chain rule.
One backward pass gives dL/dθ for every parameter θ; forward mode would need one pass per input.

The tape's memory is the point of the lesson: every array an operation keeps for its backward
(its input for ``matmul``, its output for ``tanh``) stays alive until the backward pass reaches that
operation. :class:`Tape` counts those bytes (each array once, however many operations keep it) and
remembers the peak, so the growth with depth and the saving of checkpointing can be measured.

The operations (``matmul``, ``add``, ``tanh``, ``relu``, ``mse_loss``, ``softmax_cross_entropy``) take and
return :class:`Tensor` objects and record their backward; they share their names with lesson 01's traced
operators (:mod:`mlsys_lab.operators.functional`) and the floor's array functions (:mod:`mlsys_lab.nn`)
on purpose: the same mathematics, in the engine that differentiates it.

    tape = Tape()
    x = Tensor(xp.ones((4, 3)), tape)              # an input
    w = Tensor(xp.ones((3, 2)), requires_grad=True)  # a parameter (a leaf)
    loss = mse_loss(tanh(x @ w), xp.zeros((4, 2)))
    tape.backward(loss)                            # w.grad now holds dloss/dw, shape (3, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from mlsys_lab import nn
from mlsys_lab.backend import xp


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
    a_data, b_data = a.data, b.data

    def backward(grad, needs):
        return (grad @ b_data.T if needs[0] else None, a_data.T @ grad if needs[1] else None)

    saved = tuple(t.data for t in (a, b) if not _is_parameter(t))  # parameters are counted as weights
    return _make(a_data @ b_data, (a, b), backward, saved)


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise a + b, with b broadcast over rows (a bias of shape (n,)). Keeps nothing."""
    b_is_row = b.data.ndim < a.data.ndim  # captured as a flag: a closure holding b would keep b alive

    def backward(grad, needs):
        grad_b = grad.sum(axis=0) if needs[1] and b_is_row else grad
        return (grad if needs[0] else None, grad_b if needs[1] else None)

    return _make(a.data + b.data, (a, b), backward, ())


def tanh(a: Tensor) -> Tensor:
    """y = tanh(x). Backward: dx = dy · (1 − y²), so the *output* y is kept."""
    out = xp.tanh(a.data)

    def backward(grad, needs):
        local = out * out  # 1 − y², formed in place: one temporary array instead of three
        xp.subtract(1.0, local, out=local)
        local *= grad
        return (local,)

    return _make(out, (a,), backward, (out,))


def relu(a: Tensor) -> Tensor:
    """y = max(x, 0). Backward: dx = dy · [x > 0], so a boolean mask (1 byte/element) is kept."""
    mask = a.data > 0
    out = a.data * mask

    def backward(grad, needs):
        return (grad * mask,)

    return _make(out, (a,), backward, (mask,))


def mse_loss(prediction: Tensor, target) -> Tensor:
    """L = ½ · mean((ŷ − y)²), the floor's :func:`mlsys_lab.nn.mse_loss` on the tape.

    Backward: dŷ = (ŷ − y) / N, computed in the forward and kept (one array of ŷ's size).
    """
    value, local_grad = nn.mse_loss(prediction.data, target)

    def backward(grad, needs):
        return (grad * local_grad,)

    return _make(xp.asarray(value, dtype=local_grad.dtype), (prediction,), backward, (local_grad,))


def softmax_cross_entropy(logits: Tensor, labels) -> Tensor:
    """L = mean over rows of −log softmax(z)[label]; logits (batch, classes), labels (batch,) ints.

    Backward: dz = (softmax(z) − onehot(label)) / batch. Keeps the probabilities.
    """
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


def _is_parameter(tensor: Tensor) -> bool:
    """A leaf that requires grad and lives outside any tape: a weight, counted as weights not activations."""
    return tensor.requires_grad and tensor.tape is None
