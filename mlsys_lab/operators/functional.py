"""Operators that work on arrays (computed now, with the backend ``xp``) and on proxies (recorded).

The same Python function therefore runs eagerly on arrays and traces into a graph on proxies:

    def block(x, w):
        return gelu(x @ w) * 0.5
    block(np.ones((4, 8)), np.ones((8, 8)))    # an array
    trace(block, (4, 8), (8, 8))               # a Graph
"""

from __future__ import annotations

from typing import Any

from mlsys_lab.operators.eager import IMPLEMENTATIONS
from mlsys_lab.operators.ir import Proxy, matmul_proxy, transpose_proxy
from mlsys_lab.validation import check_array, check_finite

_MIN_NDIM = {"causal_mask": 2, "transpose": 2}  # operators on the last two axes


def _operand(name: str, x: Any, op: str) -> Any:
    """An eager operand: an array of numbers with the dimensions ``op`` works on (shape and dtype only: cheap)."""
    try:  # the common case first: two attribute reads, no call (eager chains are timed kernel by kernel)
        if x.ndim >= _MIN_NDIM.get(op, 1) and x.size and x.dtype.kind in "fiu":
            return x
    except AttributeError:
        pass
    array = check_array(name, x, kinds="fiub" if op == "maximum" else "fiu")
    if array.ndim < _MIN_NDIM.get(op, 1):
        raise ValueError(f"{name} must be an array of at least {_MIN_NDIM.get(op, 1)} dimension(s) for {op}; "
                         f"got shape {tuple(array.shape)}")
    return array


def _broadcasts(first: tuple, second: tuple) -> bool:
    return all(m == n or m == 1 or n == 1 for m, n in zip(first[::-1], second[::-1], strict=False))


def _unary(op: str, x: Any) -> Any:
    if isinstance(x, Proxy):
        return x.tracer.add(op, (x.node.name,), x.shape, x.node.dtype)
    return IMPLEMENTATIONS[op]([_operand("x", x, op)], {})


def relu(x):
    """max(x, 0)."""
    return _unary("relu", x)


def exp(x):
    return _unary("exp", x)


def log(x):
    return _unary("log", x)


def tanh(x):
    return _unary("tanh", x)


def sqrt(x):
    return _unary("sqrt", x)


def square(x):
    return _unary("square", x)


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return _unary("sigmoid", x)


def gelu(x):
    """GELU, tanh form (Hendrycks & Gimpel 2016): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return _unary("gelu", x)


def maximum(a, b):
    if isinstance(a, Proxy):
        return a._binary("maximum", b)
    if isinstance(b, Proxy):
        return b._binary("maximum", a, reverse=True)
    shapes = []
    for name, value in (("a", a), ("b", b)):  # an array, or a number broadcast against the other (relu: b=0)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_finite(name, value)
        else:
            shapes.append(_operand(name, value, "maximum").shape)
    if len(shapes) == 2 and not _broadcasts(*shapes):
        raise ValueError(f"b must broadcast against a {tuple(shapes[0])}; got shape {tuple(shapes[1])}")
    return IMPLEMENTATIONS["maximum"]([a, b], {})


def matmul(a, b):
    """[..., m, k] · [..., k, n] -> [..., m, n]."""
    if isinstance(a, Proxy):
        return matmul_proxy(a, a._lift(b))
    a, b = _operand("a", a, "matmul"), _operand("b", b, "matmul")
    if a.shape[-1] != b.shape[0 if b.ndim == 1 else -2]:
        raise ValueError(f"b must have {a.shape[-1]} rows, the columns of a {tuple(a.shape)}; got {tuple(b.shape)}")
    return IMPLEMENTATIONS["matmul"]([a, b], {})


def transpose(x):
    """Swap the last two axes (a materialised copy in the graph: a kernel of class 'transform')."""
    if isinstance(x, Proxy):
        return transpose_proxy(x)
    return IMPLEMENTATIONS["transpose"]([_operand("x", x, "transpose")], {})


def softmax(x):
    """Softmax over the last axis: exp(x - max) / Σ exp(x - max)."""
    return _unary("softmax", x)


def causal_mask(x):
    """Set entries above the diagonal of the last two axes to -inf (query i sees keys j <= i)."""
    return _unary("causal_mask", x)


def reduce_sum(x):
    """Sum over the last axis: [..., n] -> [...]."""
    if isinstance(x, Proxy):
        return x.tracer.add("sum", (x.node.name,), x.shape[:-1], x.node.dtype)
    return IMPLEMENTATIONS["sum"]([_operand("x", x, "sum")], {})


def layernorm(x, weight, bias, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) · weight + bias over the last axis (Ba, Kiros & Hinton 2016)."""
    if isinstance(x, Proxy):
        return x.tracer.add(
            "layernorm", (x.node.name, weight.node.name, bias.node.name), x.shape, x.node.dtype, eps=eps
        )
    x = _operand("x", x, "layernorm")
    for name, value in (("weight", weight), ("bias", bias)):  # one per feature of the last axis
        if (shape := check_array(name, value, ndim=1, finite=True).shape)[0] != x.shape[-1]:
            raise ValueError(f"{name} must hold one value per feature of x (its last axis, {x.shape[-1]}); "
                             f"got shape {tuple(shape)}")
    check_finite("eps", eps, low=0.0, low_inclusive=False)
    return IMPLEMENTATIONS["layernorm"]([x, weight, bias], {"eps": eps})
