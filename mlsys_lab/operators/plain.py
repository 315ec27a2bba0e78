"""Graphs as plain data: a list of node dicts, the form exercises take and return.

A node is ``{"name": "t3", "op": "relu", "inputs": ["t2"], "shape": (8, 8)}``; a constant also has
``"value"``; a fused node (what a fusion pass makes) has ``"body"``, the list of the nodes it computes in one
loop, the last of which has the fused node's name. :func:`run_plain` interprets such a list with the eager
implementations (:data:`mlsys_lab.operators.eager.IMPLEMENTATIONS`), so a rewritten graph can be checked by
running it; :func:`kernels_and_bytes` counts what an eager run of it launches and moves.

    nodes, outputs = to_plain(trace(lambda x: relu(x) * 2.0, (4, 4)))
    nodes[1]        # {'name': 't1', 'op': 'relu', 'inputs': ['t0'], 'shape': (4, 4)}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsys_lab.operators.eager import IMPLEMENTATIONS
from mlsys_lab.operators.ir import Graph, Node
from mlsys_lab.validation import check_sequence, check_str, check_type

NO_KERNEL = ("input", "const", "reshape")


def to_plain(graph: Graph) -> tuple[list[dict], list[str]]:
    """(nodes as dicts in execution order, output names)."""
    check_type("graph", graph, Graph)
    nodes = []
    for n in graph.nodes:
        node = {"name": n.name, "op": n.op, "inputs": list(n.inputs), "shape": tuple(n.shape)}
        if n.op == "const":
            node["value"] = float(n.attrs["value"])
        nodes.append(node)
    return nodes, list(graph.outputs)


def _field(node: Any, key: str, where: str) -> Any:
    if not isinstance(node, dict) or key not in node:
        raise ValueError(f"{where} must be a dict with a {key!r} entry; got {str(node)[:60]}")
    return node[key]


def _evaluate(node: dict, values: dict[str, Any], where: str) -> Any:
    op, name = _field(node, "op", where), _field(node, "name", where)
    if op == "const":
        return float(_field(node, "value", where))
    inputs = list(_field(node, "inputs", where))
    missing = [i for i in inputs if i not in values]
    if missing:
        raise ValueError(f"{where} ({name} = {op}) reads {missing[0]}, which is not computed before it")
    args = [values[i] for i in inputs]
    if op == "fused":
        local = dict(zip(inputs, args, strict=True))
        body = list(_field(node, "body", where))
        if not body or _field(body[-1], "name", where) != name:
            raise ValueError(f"{where}: the body of fused node {name} must end with the node named {name}")
        for k, member in enumerate(body):
            local[member["name"]] = _evaluate(member, local, f"{where}, body[{k}]")
        return local[name]
    if op not in IMPLEMENTATIONS:
        raise ValueError(f"{where} ({name}) has op {op!r}, which is not an operator of the course")
    return IMPLEMENTATIONS[op](args, node.get("attrs", {}))


def _check_plain(nodes, outputs=...) -> None:
    """Plain nodes: a list of dicts; outputs (when given): a list of node names. Named when wrong."""
    for node in check_sequence("nodes", nodes):
        check_type("nodes", node, dict)
    if outputs is not ...:
        for name in check_sequence("outputs", outputs):
            check_str("outputs", name)


def run_plain(nodes: list[dict], outputs: list[str], arrays: dict[str, Any]) -> tuple:
    """Run a plain graph on ``arrays`` ({input name: array}); returns the outputs, in order, as a tuple."""
    _check_plain(nodes, outputs)
    check_type("arrays", arrays, dict)
    for node in nodes:
        if node.get("op") == "input" and node.get("name") not in arrays:
            raise ValueError(f"arrays must hold every input of the graph; {node.get('name')!r} missing")
    values: dict[str, Any] = {}
    for k, node in enumerate(nodes):
        name = _field(node, "name", f"node {k}")
        if node.get("op") == "input":
            values[name] = arrays[name]
            continue
        values[name] = _evaluate(node, values, f"node {k}")
    missing = [o for o in outputs if o not in values]
    if missing:
        raise ValueError(f"output {missing[0]} is not computed by any top-level node (of nodes; outputs names it)")
    return tuple(values[o] for o in outputs)


def kernels_and_bytes(nodes: list[dict]) -> tuple[int, int]:
    """(kernels, bytes) of an eager run, one kernel per top-level node: each kernel reads its distinct
    non-constant inputs once and writes its output once (float32, 4 bytes per element)."""
    _check_plain(nodes)
    shape_of = {n["name"]: tuple(n["shape"]) for n in nodes}
    const = {n["name"] for n in nodes if n["op"] == "const"}
    kernels = n_bytes = 0
    for node in nodes:
        if node["op"] in NO_KERNEL:
            continue
        kernels += 1
        reads = [i for i in dict.fromkeys(node["inputs"]) if i not in const]
        n_bytes += 4 * sum(int(np.prod(shape_of[i], dtype=np.int64)) for i in reads)
        n_bytes += 4 * int(np.prod(shape_of[node["name"]], dtype=np.int64))
    return kernels, n_bytes


def from_plain(nodes: list[dict], outputs: list[str]) -> Graph:
    """The :class:`Graph` of plain nodes without fused bodies (the inverse of :func:`to_plain`)."""
    _check_plain(nodes, outputs)
    graph_nodes = []
    for n in nodes:
        attrs = {"value": n["value"]} if n["op"] == "const" else {}
        graph_nodes.append(Node(n["name"], n["op"], tuple(n["inputs"]), tuple(n["shape"]), attrs=attrs))
    return Graph(graph_nodes, [n["name"] for n in nodes if n["op"] == "input"], list(outputs))
