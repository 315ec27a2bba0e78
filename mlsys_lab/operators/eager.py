"""Eager execution: an interpreter that walks the graph and runs one backend call per node.

This is dynamic scheduling in miniature (the notes' "算子队列 → 执行 kernel"): every call looks up each
node's implementation, reads its inputs from a table, allocates its output and frees tensors after their
last use, so it can run any graph but pays a dispatch cost per node and sees one node at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mlsys_lab.backend import xp
from mlsys_lab.nn import softmax
from mlsys_lab.operators.ir import Graph
from mlsys_lab.validation import check_int, check_type


def _causal_mask(x):
    rows, cols = x.shape[-2], x.shape[-1]
    above = xp.triu(xp.ones((rows, cols), dtype=bool), k=1 + cols - rows)
    return xp.where(above, xp.asarray(-xp.inf, dtype=x.dtype), x)


def _layernorm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / xp.sqrt(var + eps) * weight + bias


def _gelu(x):
    return 0.5 * x * (1.0 + xp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


# op -> f(list of input values, attrs) -> output. Unary/binary ops are single NumPy/CuPy calls where one
# exists; sigmoid, gelu and softmax are several calls (the library has no single kernel for them).
IMPLEMENTATIONS: dict[str, Callable[[list, dict], Any]] = {
    "neg": lambda v, a: xp.negative(v[0]),
    "exp": lambda v, a: xp.exp(v[0]),
    "log": lambda v, a: xp.log(v[0]),
    "tanh": lambda v, a: xp.tanh(v[0]),
    "sqrt": lambda v, a: xp.sqrt(v[0]),
    "square": lambda v, a: xp.square(v[0]),
    "relu": lambda v, a: xp.maximum(v[0], 0),
    "sigmoid": lambda v, a: 1.0 / (1.0 + xp.exp(-v[0])),
    "gelu": lambda v, a: _gelu(v[0]),
    "silu": lambda v, a: v[0] / (1.0 + xp.exp(-v[0])),  # x·sigmoid(x), what a pattern rewrite makes
    "add": lambda v, a: xp.add(v[0], v[1]),
    "sub": lambda v, a: xp.subtract(v[0], v[1]),
    "mul": lambda v, a: xp.multiply(v[0], v[1]),
    "div": lambda v, a: xp.divide(v[0], v[1]),
    "maximum": lambda v, a: xp.maximum(v[0], v[1]),
    "matmul": lambda v, a: xp.matmul(v[0], v[1]),
    "transpose": lambda v, a: xp.ascontiguousarray(xp.swapaxes(v[0], -1, -2)),
    "reshape": lambda v, a: v[0].reshape(a["shape"]),
    "softmax": lambda v, a: softmax(v[0]),
    "causal_mask": lambda v, a: _causal_mask(v[0]),
    "sum": lambda v, a: v[0].sum(axis=-1),
    "layernorm": lambda v, a: _layernorm(v[0], v[1], v[2], a.get("eps", 1e-5)),
    # Nodes made by passes carry their own kernel (a generated fused loop, a fused attention).
    "fused": lambda v, a: a["kernel"](*v),
    "attention": lambda v, a: a["kernel"](*v),
}


@dataclass(frozen=True)
class RunStats:
    """What one interpreted run did: kernels launched and the peak of live tensor bytes."""

    n_kernels: int
    peak_live_bytes: int

    def __post_init__(self) -> None:
        check_int("n_kernels", self.n_kernels, low=0)
        check_int("peak_live_bytes", self.peak_live_bytes, low=0)


def check_inputs(graph: Graph, arrays: tuple) -> None:
    """Every array must match the shape its input node was traced with (a shape guard)."""
    check_type("graph", graph, Graph)
    if not isinstance(arrays, (tuple, list)):
        raise TypeError(f"arrays must be a tuple of input arrays; got {type(arrays).__name__}")
    for array in arrays:
        if not hasattr(array, "shape"):
            raise TypeError(f"arrays must hold arrays; got {type(array).__name__} {array!r:.40}")
    if len(arrays) != len(graph.inputs):
        raise ValueError(f"the graph takes {len(graph.inputs)} inputs; got {len(arrays)} arrays")
    for name, array in zip(graph.inputs, arrays, strict=True):
        node = graph.node(name)
        if tuple(array.shape) != node.shape:
            raise ValueError(
                f"input {node.attrs.get('param', name)} must have shape {node.shape} (traced); "
                f"got {tuple(array.shape)}"
            )


def run_eager(graph: Graph, *arrays: Any, stats: list | None = None) -> Any:
    """Interpret ``graph`` on ``arrays``: one backend call per node, tensors freed after their last use.

    Returns the output (a tuple when the graph has several). Pass ``stats=[]`` to receive a
    :class:`RunStats` appended to it.
    """
    check_type("graph", graph, Graph)
    if stats is not None:
        check_type("stats", stats, list)
    check_inputs(graph, arrays)
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for name in node.inputs:
            last_use[name] = index
    by_name = {node.name: node for node in graph.nodes}
    values: dict[str, Any] = dict(zip(graph.inputs, arrays, strict=True))
    live = peak = 0
    kernels = 0
    for index, node in enumerate(graph.nodes):
        if node.op == "input":
            continue
        if node.op == "const":
            values[node.name] = node.attrs["value"]
            continue
        out = IMPLEMENTATIONS[node.op]([values[name] for name in node.inputs], node.attrs)
        values[node.name] = out
        if node.op != "reshape":
            kernels += 1
            live += node.n_bytes
            peak = max(peak, live)
        for name in set(node.inputs):
            if last_use[name] == index and name not in graph.outputs and name not in graph.inputs:
                producer = by_name[name]
                if producer.op not in ("const", "reshape"):
                    live -= producer.n_bytes
                del values[name]
    if stats is not None:
        stats.append(RunStats(kernels, peak))
    results = tuple(values[name] for name in graph.outputs)
    return results if len(results) > 1 else results[0]
