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


def _unary(op: str, x: Any) -> Any:
    if isinstance(x, Proxy):
        return x.tracer.add(op, (x.node.name,), x.shape, x.node.dtype)
    return IMPLEMENTATIONS[op]([x], {})


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
    return IMPLEMENTATIONS["maximum"]([a, b], {})


def matmul(a, b):
    """[..., m, k] · [..., k, n] -> [..., m, n]."""
    if isinstance(a, Proxy):
        return matmul_proxy(a, a._lift(b))
    return IMPLEMENTATIONS["matmul"]([a, b], {})


def transpose(x):
    """Swap the last two axes (a materialised copy in the graph: a kernel of class 'transform')."""
    if isinstance(x, Proxy):
        return transpose_proxy(x)
    return IMPLEMENTATIONS["transpose"]([x], {})


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
    return IMPLEMENTATIONS["sum"]([x], {})


def layernorm(x, weight, bias, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) · weight + bias over the last axis (Ba, Kiros & Hinton 2016)."""
    if isinstance(x, Proxy):
        return x.tracer.add(
            "layernorm", (x.node.name, weight.node.name, bias.node.name), x.shape, x.node.dtype, eps=eps
        )
    return IMPLEMENTATIONS["layernorm"]([x, weight, bias], {"eps": eps})
