"""A small graph IR: nodes in topological order, and a tracer that records an ordinary Python function.

Tracing runs the function once on :class:`Proxy` objects instead of arrays; every operator a proxy meets
appends a :class:`Node` to the graph: ``torch.fx``'s symbolic tracing (Reed et al., "torch.fx", MLSys 2022).
TorchDynamo captures differently: it reads the function's bytecode and, where it cannot capture, ends the graph
(a graph break) and lets Python run (Ansel et al., "PyTorch 2", ASPLOS 2024). The graph is then transformed by
passes and run by an interpreter (eager: one kernel per node) or a compiled plan.

    def mlp(x, w1, w2):
        return relu(x @ w1) @ w2
    graph = trace(mlp, (64, 128), (128, 256), (256, 128))
    print(graph)        # t0 = input (64, 128) ... t4 = matmul(t3, w2)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from mlsys_lab.validation import check_int, check_sequence, check_str, check_type

# op -> class of the notes. Elementwise ops can be fused into one generated loop.
UNARY = ("neg", "exp", "log", "tanh", "sqrt", "relu", "sigmoid", "gelu", "square")
BINARY = ("add", "sub", "mul", "div", "maximum")
OP_CLASS = {
    **{op: "elementwise" for op in UNARY + BINARY},
    "causal_mask": "elementwise",
    "silu": "elementwise",  # made by a pattern rewrite of x * sigmoid(x), never traced
    "matmul": "tensor",
    "attention": "tensor",
    "softmax": "reduction",
    "layernorm": "reduction",
    "sum": "reduction",
    "transpose": "transform",
    "reshape": "transform",
    "concat": "transform",
    "fused": "elementwise",
    "input": "input",
    "const": "const",
}
FUSABLE = frozenset(UNARY + BINARY)


@dataclass
class Node:
    """One operator application: ``name = op(*inputs, **attrs)`` producing a tensor of ``shape``."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"name", "op", "inputs", "shape", "dtype", "attrs"})

    name: str
    op: str
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str = "float32"
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_str("op", self.op)
        check_str("dtype", self.dtype)
        if not all(isinstance(name, str) for name in check_sequence("inputs", self.inputs)):
            raise TypeError(f"inputs must be a tuple of node names (str); got {self.inputs!r:.60}")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                   for n in check_sequence("shape", self.shape)):
            raise ValueError(f"shape must be a tuple of sizes (ints >= 0); got {self.shape!r:.60}")
        check_type("attrs", self.attrs, dict)

    @property
    def n_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        if self.op == "input":
            return f"{self.name} = input {self.shape}"
        if self.op == "const":
            return f"{self.name} = const {self.attrs['value']:g}"
        extra = {k: v for k, v in self.attrs.items() if k not in ("kernel", "body")}
        args = ", ".join(list(self.inputs) + [f"{k}={v}" for k, v in extra.items()])
        return f"{self.name} = {self.op}({args})  # {self.shape}"


@dataclass
class Graph:
    """Nodes in a valid execution order; ``inputs`` and ``outputs`` are node names."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({
        "nodes", "inputs", "outputs", "node", "users", "bytes_moved", "n_kernels", "op_counts",
    })

    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]

    def __post_init__(self) -> None:
        if not all(isinstance(node, Node) for node in check_sequence("nodes", self.nodes)):
            raise TypeError("nodes must be a list of Node")
        for name in ("inputs", "outputs"):
            if not all(isinstance(n, str) for n in check_sequence(name, getattr(self, name))):
                raise TypeError(f"{name} must be a list of node names (str); got {getattr(self, name)!r:.60}")
        check_sequence("outputs", self.outputs, min_size=1)  # a graph computes something
        seen: set[str] = set()  # one pass over the nodes: each reads only what earlier nodes produced
        for node in self.nodes:
            missing = next((i for i in node.inputs if i not in seen), None)
            if missing is not None:
                raise ValueError(f"nodes must be in execution order, each reading earlier nodes: {node.name} reads "
                                 f"{missing!r}, which no earlier node produces")
            seen.add(node.name)
        for name in ("inputs", "outputs"):
            missing = next((n for n in getattr(self, name) if n not in seen), None)
            if missing is not None:
                raise ValueError(f"{name} must name nodes of the graph; {missing!r} is none of its {len(seen)} nodes")

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ValueError(
            f"name must be a node of the graph ({', '.join(n.name for n in self.nodes)}); got {name!r}"
        )

    def users(self) -> dict[str, list[str]]:
        """name -> names of the nodes that read it."""
        table: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for node in self.nodes:
            for name in node.inputs:
                table[name].append(node.name)
        return table

    def copy(self) -> Graph:
        nodes = [Node(n.name, n.op, n.inputs, n.shape, n.dtype, dict(n.attrs)) for n in self.nodes]
        return Graph(nodes, list(self.inputs), list(self.outputs))

    def bytes_moved(self) -> int:
        """Minimum memory traffic of running the graph one kernel per node: every kernel reads its tensor
        inputs and writes its output (constants are folded into the code; a reshape is a view)."""
        total = 0
        for node in self.nodes:
            if node.op in ("input", "const", "reshape"):
                continue
            reads = sum(
                self.node(name).n_bytes
                for name in dict.fromkeys(node.inputs)
                if self.node(name).op != "const"
            )
            total += reads + node.n_bytes
        return total

    @property
    def n_kernels(self) -> int:
        """Kernels an eager run launches: every node but inputs, constants and views (reshape)."""
        return sum(n.op not in ("input", "const", "reshape") for n in self.nodes)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [str(n) for n in self.nodes]
        return "\n".join(lines + [f"return {', '.join(self.outputs)}"])


class Tracer:
    """Collects nodes while a function runs on proxies."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(
        self, op: str, inputs: tuple[str, ...], shape: tuple[int, ...], dtype: str = "float32", **attrs: Any
    ) -> Proxy:
        node = Node(f"t{len(self.nodes)}", op, inputs, tuple(int(s) for s in shape), dtype, attrs)
        self.nodes.append(node)
        return Proxy(self, node)

    def const(self, value: float) -> Proxy:
        return self.add("const", (), (), value=float(value))


class Proxy:
    """Stands in for a tensor during tracing: has a shape and dtype, records every operator applied to it."""

    __array_priority__ = 1000  # so that ndarray (op) proxy defers to the proxy

    def __init__(self, tracer: Tracer, node: Node) -> None:
        self.tracer, self.node = tracer, node

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    def _lift(self, other: Any) -> Proxy:
        if isinstance(other, Proxy):
            return other
        if isinstance(other, (int, float, np.number)):
            return self.tracer.const(float(other))
        raise TypeError(
            f"cannot mix a traced tensor with {type(other).__name__}; pass it as an input instead"
        )

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Proxy:
        other = self._lift(other)
        a, b = (other, self) if reverse else (self, other)
        shape = np.broadcast_shapes(a.shape, b.shape)
        return self.tracer.add(op, (a.node.name, b.node.name), shape, self.node.dtype)

    def __add__(self, o):
        return self._binary("add", o)  # noqa: E704

    def __radd__(self, o):
        return self._binary("add", o, True)  # noqa: E704

    def __sub__(self, o):
        return self._binary("sub", o)  # noqa: E704

    def __rsub__(self, o):
        return self._binary("sub", o, True)  # noqa: E704

    def __mul__(self, o):
        return self._binary("mul", o)  # noqa: E704

    def __rmul__(self, o):
        return self._binary("mul", o, True)  # noqa: E704

    def __truediv__(self, o):
        return self._binary("div", o)  # noqa: E704

    def __rtruediv__(self, o):
        return self._binary("div", o, True)  # noqa: E704

    def __neg__(self) -> Proxy:
        return self.tracer.add("neg", (self.node.name,), self.shape, self.node.dtype)

    def __matmul__(self, other: Proxy) -> Proxy:
        return matmul_proxy(self, self._lift(other))

    @property
    def T(self) -> Proxy:  # noqa: N802  (NumPy's name)
        return transpose_proxy(self)


def matmul_proxy(a: Proxy, b: Proxy) -> Proxy:
    check_type("a", a, Proxy)
    check_type("b", b, Proxy)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul needs [..., m, k] · [..., k, n]; got {a.shape} and {b.shape}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.tracer.add(
        "matmul", (a.node.name, b.node.name), (*batch, a.shape[-2], b.shape[-1]), a.node.dtype
    )


def transpose_proxy(x: Proxy) -> Proxy:
    check_type("x", x, Proxy)
    if x.ndim < 2:
        raise ValueError(f"transpose swaps the last two axes and needs ndim >= 2; got shape {x.shape}")
    return x.tracer.add("transpose", (x.node.name,), (*x.shape[:-2], x.shape[-1], x.shape[-2]), x.node.dtype)


def trace(fn: Callable[..., Any], *shapes: tuple[int, ...], dtype: str = "float32") -> Graph:
    """Run ``fn`` once on proxies of ``shapes`` and return the recorded graph.

    ``fn`` takes one tensor per shape and returns a tensor or a tuple of tensors. Its Python control
    flow runs at trace time (a loop is unrolled, an ``if`` on a shape is decided), as in ``torch.fx``; a branch
    on a tensor's *value* cannot be traced (TorchDynamo would break the graph there).
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable (the function to trace); got {type(fn).__name__} {fn!r:.40}")
    n_params = len(inspect.signature(fn).parameters)
    if len(shapes) != n_params:
        raise ValueError(
            f"shapes must give one shape per parameter of {fn.__name__} ({n_params}); got {len(shapes)}"
        )
    tracer = Tracer()
    names = list(inspect.signature(fn).parameters)
    proxies = []
    for name, shape in zip(names, shapes, strict=True):
        shape = tuple(check_int(f"shape of {name}", s, low=1) for s in shape)
        proxy = tracer.add("input", (), shape, dtype, param=name)
        proxies.append(proxy)
    result = fn(*proxies)
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    if not all(isinstance(o, Proxy) for o in outputs):
        raise ValueError(f"{fn.__name__} must return traced tensors (results of operators on its inputs)")
    return Graph(tracer.nodes, [p.node.name for p in proxies], [o.node.name for o in outputs])


def layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """Positions for drawing: y = depth (longest path from an input, constants folded into their user),
    x = spread evenly within each depth. Returns name -> (x, y), constants left out."""
    check_type("graph", graph, Graph)
    depth: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "const":
            continue
        parents = [depth[i] for i in node.inputs if i in depth]
        depth[node.name] = 1 + max(parents) if parents else 0
    rows: dict[int, list[str]] = {}
    for name, level in depth.items():
        rows.setdefault(level, []).append(name)
    positions = {}
    for level, names in rows.items():
        for i, name in enumerate(names):
            positions[name] = (i - (len(names) - 1) / 2, -float(level))
    return positions
