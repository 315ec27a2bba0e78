"""Graph passes: each takes a :class:`Graph` and returns a new one that computes the same outputs.

The notes' three graph optimisations ("少写 HBM，少 launch kernel，多 overlap"):

* :func:`fuse_elementwise`: operator fusion (算子融合), a chain of elementwise ops becomes one kernel;
* :func:`replace_attention`: pattern recognition and replacement (图识别与替换), Q·Kᵀ → scale → mask →
  softmax → ·V becomes one fused attention kernel;
* :func:`reorder_for_memory`: schedule reordering (调度重排), same dependencies, lower peak memory;

plus :func:`eliminate_dead_code`, which removes nodes no output depends on (what a replacement leaves).
``PIPELINE`` lists them in the order :func:`mlsys_lab.operators.compile.compile_graph` applies them.
"""

from __future__ import annotations

import functools

from mlsys_lab.kernels.operators.attention import fused_attention
from mlsys_lab.operators import codegen
from mlsys_lab.operators.ir import FUSABLE, Graph, Node
from mlsys_lab.validation import check_choice, check_type


def eliminate_dead_code(graph: Graph) -> Graph:
    """Keep only the nodes some output depends on (and every input, which callers still pass)."""
    check_type("graph", graph, Graph)
    needed = set(graph.outputs) | set(graph.inputs)
    for node in reversed(graph.nodes):
        if node.name in needed:
            needed.update(node.inputs)
    kept = graph.copy()
    kept.nodes = [n for n in kept.nodes if n.name in needed]
    return kept


def fusion_groups(graph: Graph) -> list[list[Node]]:
    """Groups of elementwise nodes that one generated loop can compute.

    Rule: a fusable node joins the group of a fusable producer of the same shape when that producer's only
    user is this node and it is not a graph output, so every value inside a group stays in registers and
    only the group's last node is written to memory. A value read by two nodes stays a separate tensor.
    """
    check_type("graph", graph, Graph)
    users = graph.users()
    group_of: dict[str, int] = {}
    groups: list[list[Node]] = []
    for node in graph.nodes:
        if node.op not in FUSABLE:
            continue
        joinable = []
        for name in dict.fromkeys(node.inputs):
            producer = graph.node(name)
            if (
                name in group_of
                and producer.shape == node.shape
                and users[name] == [node.name] * len(users[name])
                and name not in graph.outputs
            ):
                joinable.append(group_of[name])
        if joinable:
            target = joinable[0]
            for other in joinable[1:]:  # two chains meeting at this node become one group
                if other != target:
                    for member in groups[other]:
                        group_of[member.name] = target
                    groups[target] += groups[other]
                    groups[other] = []
            groups[target].append(node)
            group_of[node.name] = target
        else:
            group_of[node.name] = len(groups)
            groups.append([node])
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    return [sorted(g, key=lambda n: position[n.name]) for g in groups if len(g) > 1]


def fuse_elementwise(graph: Graph, target: str | None = None) -> Graph:
    """Replace each fusion group by one ``fused`` node whose kernel is generated (numba on CPU, CuPy on GPU).

    The fused node keeps the name of the group's last node, so its users need no rewiring.
    """
    check_type("graph", graph, Graph)
    check_choice("target", target, (None, "cpu", "gpu"))
    fused = graph.copy()
    for group in fusion_groups(fused):
        members = {n.name for n in group}
        consts = {}
        inputs: list[str] = []
        for node in group:
            for name in node.inputs:
                if name in members:
                    continue
                producer = fused.node(name)
                if producer.op == "const":
                    consts[name] = producer.attrs["value"]
                elif name not in inputs:
                    inputs.append(name)
        head = group[-1]
        shapes = [fused.node(name).shape for name in inputs]
        kernel = codegen.elementwise_kernel(
            group, consts, tuple(inputs), shapes, (head.name,), head.shape, head.dtype, target
        )
        label = "→".join(n.op for n in group)
        replacement = Node(
            head.name, "fused", tuple(inputs), head.shape, head.dtype, {"ops": label, "kernel": kernel}
        )
        fused.nodes = [
            replacement if n.name == head.name else n
            for n in fused.nodes
            if n.name not in members or n.name == head.name
        ]
    return eliminate_dead_code(fused)


def _single_user(graph: Graph, users: dict[str, list[str]], name: str) -> bool:
    return len(users[name]) == 1 and name not in graph.outputs


def match_attention(graph: Graph, node: Node) -> dict | None:
    """If ``node`` ends matmul(softmax([causal_mask](scale·(Q·transpose(K)))), V), return the
    parts, else None.

    Every intermediate must have this chain as its only user (otherwise it is needed elsewhere and must
    still be computed). The scale may be ``s * c``, ``c * s`` or ``s / c`` with a constant c.
    """
    check_type("graph", graph, Graph)
    check_type("node", node, Node)
    known = next((n for n in graph.nodes if n.name == node.name), None)
    if known is None:
        raise ValueError(f"node must be one of graph's nodes; no node of graph has its name {node.name!r}")
    if known is not node and (known.op, tuple(known.inputs)) != (node.op, tuple(node.inputs)):
        raise ValueError(f"node must be one of graph's nodes; its op and inputs {node.op}{tuple(node.inputs)} are not "
                         f"those of graph's {known.name} = {known.op}{tuple(known.inputs)}")
    users = graph.users()
    if node.op != "matmul":
        return None
    probs = graph.node(node.inputs[0])
    if probs.op != "softmax" or not _single_user(graph, users, probs.name):
        return None
    scaled = graph.node(probs.inputs[0])
    causal = scaled.op == "causal_mask"
    if causal:
        if not _single_user(graph, users, scaled.name):
            return None
        scaled = graph.node(scaled.inputs[0])
    if scaled.op not in ("mul", "div") or not _single_user(graph, users, scaled.name):
        return None
    a, b = (graph.node(name) for name in scaled.inputs)
    if b.op == "const":
        scores, scale = a, b.attrs["value"] if scaled.op == "mul" else 1.0 / b.attrs["value"]
    elif a.op == "const" and scaled.op == "mul":
        scores, scale = b, a.attrs["value"]
    else:
        return None
    if scores.op != "matmul" or not _single_user(graph, users, scores.name):
        return None
    k_t = graph.node(scores.inputs[1])
    if k_t.op != "transpose" or not _single_user(graph, users, k_t.name):
        return None
    return {"q": scores.inputs[0], "k": k_t.inputs[0], "v": node.inputs[1], "scale": scale, "causal": causal}


def replace_attention(graph: Graph) -> Graph:
    """Replace every matched attention chain (6 kernels) by one ``attention`` node; drop the dead chain."""
    check_type("graph", graph, Graph)
    replaced = graph.copy()
    for index, node in enumerate(replaced.nodes):
        parts = match_attention(replaced, node)
        if parts is None:
            continue
        kernel = functools.partial(fused_attention, scale=parts["scale"], causal=parts["causal"])
        replaced.nodes[index] = Node(
            node.name,
            "attention",
            (parts["q"], parts["k"], parts["v"]),
            node.shape,
            node.dtype,
            {"scale": round(parts["scale"], 6), "causal": parts["causal"], "kernel": kernel},
        )
    return eliminate_dead_code(replaced)


def reorder_for_memory(graph: Graph) -> Graph:
    """List scheduling that keeps few bytes live: among the ready nodes, run the one whose output adds the
    fewest bytes minus the bytes it lets us free (ties: original order). Dependencies are respected, so
    the result is the same; only the peak of live memory changes (compare with
    :func:`mlsys_lab.operators.memory_plan.peak_live_bytes`).
    """
    check_type("graph", graph, Graph)
    remaining_users = {name: len(us) for name, us in graph.users().items()}
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    protected = set(graph.inputs) | set(graph.outputs)
    done: set[str] = set()
    order: list[Node] = []
    pending = list(graph.nodes)

    def delta(node: Node) -> int:
        freed = sum(
            graph.node(i).n_bytes
            for i in set(node.inputs)
            if i not in protected and remaining_users[i] == node.inputs.count(i)
        )
        produced = 0 if node.op in ("input", "const", "reshape") else node.n_bytes
        return produced - freed

    while pending:
        ready = [n for n in pending if all(i in done for i in n.inputs)]
        best = min(ready, key=lambda n: (delta(n), position[n.name]))
        order.append(best)
        done.add(best.name)
        pending.remove(best)
        for name in best.inputs:
            remaining_users[name] -= 1
    reordered = graph.copy()
    reordered.nodes = [reordered.node(n.name) for n in order]
    return reordered


# The compiler's pipeline, in order: replacement before fusion (the attention chain would otherwise be
# partly fused and no longer match), dead-code elimination after replacement, reordering last.
PIPELINE = (replace_attention, eliminate_dead_code, fuse_elementwise, reorder_for_memory)
