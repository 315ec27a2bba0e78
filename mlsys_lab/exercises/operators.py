"""Checks for the exercises of 01 operators and graphs.

Graph exercises take and return plain data (:mod:`mlsys_lab.operators.plain`): a list of node dicts and the
output names. Each check runs the learner's pass on fixed boundary graphs and on random traced programs
(:mod:`mlsys_lab.operators.random_graphs`), executes what comes back against eager execution of the
original, and counts its kernels and bytes on this side, from the returned nodes.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.exercises.operators_cuda import check_bias_gelu  # noqa: F401  (re-exported: the lesson's checks)
from mlsys_lab.operators import functional as F
from mlsys_lab.operators.cost import matmul_cost
from mlsys_lab.operators.ir import FUSABLE, Graph, trace
from mlsys_lab.operators.memory_plan import (
    Interval,
    arena_bytes,
    liveness,
    lower_bound_bytes,
    plan_conflicts,
    plan_greedy_by_size,
)
from mlsys_lab.operators.passes import fusion_groups
from mlsys_lab.operators.plain import from_plain, kernels_and_bytes, run_plain, to_plain
from mlsys_lab.operators.random_graphs import random_graph
from mlsys_lab.operators.schedule import list_schedule
from mlsys_lab.units import bytes_per_element


def check_matmul_intensity(fn) -> None:
    """``fn(m, n, k, bytes_per_element)`` -> FLOP per byte of C[m,n] = A[m,k]·B[k,n], each matrix moved once.
    Fixed cases: the two examples, the smallest product (1×1×1, 1 byte), and m, n, k all different."""
    cases = [
        Case("m=n=k=1024, fp32", (1024, 1024, 1024, 4), expected=1024 / 6),
        Case("m=1, n=k=4096, bf16 (a GEMV)", (1, 4096, 4096, 2), expected=matmul_cost(1, 4096, 4096, "bf16").intensity),
        Case("m=n=k=1, fp8", (1, 1, 1, 1), expected=2 / 3),
        Case("m=96, n=7, k=300, fp64", (96, 7, 300, 8), expected=matmul_cost(96, 7, 300, "fp64").intensity),
    ]
    g = rng()
    for _ in range(10):
        m, n, k = (int(v) for v in g.integers(1, 9000, 3))
        dtype = str(g.choice(["fp8", "bf16", "fp32", "fp64"]))  # 1, 2, 4, 8 bytes per element
        b = int(bytes_per_element(dtype))
        cases.append(
            Case(f"m={m}, n={n}, k={k}, {b} B", (m, n, k, b), expected=matmul_cost(m, n, k, dtype).intensity)
        )
    check("matmul_intensity", fn, cases)


def reference_can_fuse(graph: Graph, producer: str, consumer: str) -> bool:
    """The lesson's rule: both fusable elementwise ops of the same shape; the consumer is the producer's
    only reader, and the producer is not an output of the graph."""
    p, c = graph.node(producer), graph.node(consumer)
    users = graph.users()[producer]
    return (
        p.op in FUSABLE
        and c.op in FUSABLE
        and p.shape == c.shape
        and set(users) == {consumer}
        and producer not in graph.outputs
    )


def boundary_programs() -> dict[str, object]:
    """Small programs, one per trap of a fusion rule (x, w of 8×8, b of 8)."""

    def chain(x, w, b):  # tanh → mul → sigmoid: everything fuses
        return F.sigmoid(F.tanh(x) * 0.5)

    def x_times_x(x, w, b):  # relu is read by one node, twice
        t = F.relu(x)
        return F.tanh(t * t)

    def read_twice(x, w, b):  # exp is read by two nodes: it must reach memory
        t = F.exp(x)
        return t * (t + 1.0)

    def also_an_output(x, w, b):  # tanh has one reader but the caller wants it too
        t = F.tanh(x)
        return F.relu(t), t

    def mixed_shapes(x, w, b):  # exp → relu on vectors fuses; relu (8,) → add (8, 8) does not
        return x + F.relu(F.exp(F.reduce_sum(x)))

    def around_a_matmul(x, w, b):  # gelu → matmul, matmul → relu: not elementwise
        return F.relu(F.matmul(F.gelu(x), w))

    def around_a_mask(x, w, b):  # causal_mask is elementwise in class but not fusable
        return F.relu(F.causal_mask(F.exp(x)))

    def shared_with_a_matmul(x, w, b):  # exp is read by tanh and by a matmul: it must reach memory
        t = F.exp(x)
        return F.matmul(t, w) + F.tanh(t)

    return {f.__name__.replace("_", " "): f for f in (chain, x_times_x, read_twice, also_an_output, mixed_shapes,
                                                       around_a_matmul, around_a_mask, shared_with_a_matmul)}


def _edges(graph: Graph) -> list[tuple[str, str]]:
    return [(p, node.name) for node in graph.nodes for p in dict.fromkeys(node.inputs)
            if graph.node(p).op not in ("input", "const")]


def check_can_fuse(fn) -> None:
    """``fn(graph, producer, consumer)`` -> may ``consumer`` join ``producer``'s fused kernel?

    Every edge of the boundary programs (x·x, a value read twice, a graph output, mixed shapes, a matmul, a
    causal mask), then edges of random programs, half of them fusable when the programs allow it."""
    cases = []
    for label, program in boundary_programs().items():
        graph = trace(program, (8, 8), (8, 8), (8,))
        for p, c in _edges(graph):
            text = f"{label}: {graph.node(p).op} {p} → {graph.node(c).op} {c}"
            cases.append(Case(text, (graph, p, c), expected=reference_can_fuse(graph, p, c)))
    g = rng()
    want = True
    for _ in range(200):
        if len(cases) >= 40:
            break
        graph = random_graph(g, int(g.integers(6, 16)))
        edges = [e for e in _edges(graph) if reference_can_fuse(graph, *e) == want] or _edges(graph)
        if not edges:
            continue
        p, c = edges[int(g.integers(len(edges)))]
        text = f"random program: {graph.node(p).op} {p} → {graph.node(c).op} {c}"
        cases.append(Case(text, (graph, p, c), expected=reference_can_fuse(graph, p, c)))
        want = not want
    check("can_fuse", fn, cases)


def _random_intervals(g: np.random.Generator) -> list[Interval]:
    n = int(g.integers(3, 16))
    starts = g.integers(0, 12, n)
    return [
        Interval(f"t{i}", int(s), int(s + g.integers(0, 5)), int(g.integers(1, 64)) * 1024)
        for i, s in enumerate(starts)
    ]


def offsets_problem(intervals: list[Interval], offsets, budget: int) -> str | None:
    """Why ``offsets`` is not a valid plan within ``budget`` bytes (None when it is)."""
    if not isinstance(offsets, dict):
        return f"expected a dict name -> offset, got {type(offsets).__name__}"
    try:
        conflicts = plan_conflicts(intervals, offsets)
    except ValueError as exc:
        return str(exc)
    if conflicts:
        return f"{conflicts[0][0]} and {conflicts[0][1]} are live together but overlap in memory"
    if any(int(offsets[iv.name]) < 0 for iv in intervals):
        return "offsets must be >= 0"
    arena = arena_bytes(intervals, offsets)
    if arena > budget:
        return f"arena {arena} B is over the budget {budget} B (lower bound {lower_bound_bytes(intervals)} B)"
    return None


def check_assign_offsets(fn) -> None:
    """``fn(intervals)`` -> {name: byte offset} with no two co-live tensors overlapping, within a budget of
    1.1 × the arena that greedy-by-size needs (and never below the lower bound, which no plan beats).

    Fixed tables: the hand example (tensors that meet at one step), one where placing in order of start
    needs 1.8 × the best arena, one where the first gap is too small, tensors live for one step, a real
    MLP block; then random tables and the liveness of random traced programs."""

    def mlp(x, w1, w2):
        return F.relu(x @ w1) @ w2 + x

    iv = Interval
    tables = [
        ("hand example", [iv("A", 0, 1, 100), iv("B", 1, 2, 50), iv("C", 2, 3, 100)]),
        ("start order is wasteful", [iv("A", 0, 2, 100), iv("B", 3, 3, 700), iv("C", 3, 5, 100), iv("D", 4, 6, 800)]),
        ("a gap too small", [iv("Y", 0, 0, 250), iv("X", 0, 1, 240), iv("Z", 1, 2, 100), iv("V", 1, 2, 90),
                             iv("U", 1, 1, 80)]),
        ("one-step tensors", [iv("A", 0, 0, 64), iv("B", 1, 1, 64), iv("C", 1, 1, 32), iv("D", 2, 2, 96)]),
        # B and D reuse A's bytes after A dies; C lives beside all three: the blocks it must avoid, sorted by
        # offset, are [0, 100), [0, 1000), [100, 200), and a gap search whose cursor steps back to 200 overlaps A.
        ("a block nested in a longer one", [iv("A", 0, 1, 1000), iv("B", 3, 4, 100), iv("D", 3, 4, 100),
                                            iv("C", 0, 4, 50)]),
        ("MLP block", liveness(trace(mlp, (64, 256), (256, 1024), (1024, 256)))),
    ]
    g = rng()
    tables += [(f"random table {i + 1}", _random_intervals(g)) for i in range(8)]
    tables += [(f"random program {i + 1}", liveness(random_graph(g, int(g.integers(8, 16)), n=int(n))))
               for i, n in enumerate(g.integers(2, 40, 3))]
    cases = []
    for label, intervals in tables:
        budget = int(1.1 * arena_bytes(intervals, plan_greedy_by_size(intervals, alignment=1)))
        cases.append(Case(f"{label}, {len(intervals)} tensors", (intervals,), expected=None,
                          check_result=lambda got, ivs=intervals, b=budget: offsets_problem(ivs, got, b)))
    check("assign_offsets", fn, cases, compare=lambda got, expected: True)


def _graph_cases(g: np.random.Generator, n_random: int) -> list[tuple[str, Graph]]:
    fixed = [(label, trace(p, (8, 8), (8, 8), (8,))) for label, p in boundary_programs().items()]
    return fixed + [(f"random program {i + 1}", random_graph(g, int(g.integers(8, 18)))) for i in range(n_random)]


def _compare_runs(nodes: list[dict], outputs: list[str], got: list[dict], g: np.random.Generator) -> str | None:
    """Run the learner's graph and the original on the same random inputs; the first difference, or None."""
    # The eager operators run on the session's backend (CuPy on a GPU): inputs go there, results come back.
    arrays = {n["name"]: backend.xp.asarray(g.uniform(-1, 1, n["shape"]).astype(np.float32))
              for n in nodes if n["op"] == "input"}
    with np.errstate(all="ignore"):  # exp of exp of ... may overflow: inf and nan must then match too
        expected = run_plain(nodes, outputs, arrays)
        try:
            results = run_plain(got, outputs, arrays)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            return f"the returned graph does not run: {exc}"
    for name, a, b in zip(outputs, map(backend.asnumpy, results), map(backend.asnumpy, expected), strict=True):
        if np.shape(a) != np.shape(b) or not np.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True):
            return f"output {name} differs from the original graph's"
    return None


def _as_nodes(got) -> str | None:
    if not isinstance(got, list) or not all(isinstance(n, dict) and {"name", "op", "inputs", "shape"} <= set(n)
                                            for n in got):
        return "expected a list of node dicts with name, op, inputs and shape"
    return None


def reference_fuse_graph(nodes: list[dict], outputs: list[str]) -> list[dict]:
    """The lesson's fusion rule (:func:`fusion_groups`): each group becomes one ``fused`` node at its last member."""
    groups = fusion_groups(from_plain(nodes, outputs))
    by_name = {n["name"]: n for n in nodes}
    head = {group[-1].name: group for group in groups}
    inside = {n.name for group in groups for n in group[:-1]}
    fused = []
    for node in nodes:
        if node["name"] in inside:
            continue
        if node["name"] in head:
            names = {n.name for n in head[node["name"]]}
            reads = dict.fromkeys(i for n in head[node["name"]] for i in n.inputs if i not in names)
            node = {"name": node["name"], "op": "fused", "inputs": list(reads), "shape": node["shape"],
                    "body": [by_name[n.name] for n in head[node["name"]]]}
        fused.append(node)
    return fused


def fusion_problem(nodes: list[dict], outputs: list[str], got, g: np.random.Generator) -> str | None:
    """Why ``got`` is not a fusion of ``nodes`` as good as the lesson's rule (None when it is)."""
    problem = _as_nodes(got)
    if problem:
        return problem
    computed = [n["name"] for n in got if n["op"] != "fused"]
    for node in (n for n in got if n["op"] == "fused"):
        body = node.get("body")
        if not isinstance(body, list) or _as_nodes(body):
            return f"fused node {node['name']} needs a 'body': the list of node dicts it computes"
        for member in body:
            if member["op"] not in FUSABLE or tuple(member["shape"]) != tuple(node["shape"]):
                return (f"fused node {node['name']} computes {member['name']} = {member['op']} "
                        f"{tuple(member['shape'])}: a fused loop holds fusable ops of its own shape "
                        f"{tuple(node['shape'])} only")
        computed += [m["name"] for m in body]
    wanted = sorted(n["name"] for n in nodes)
    if sorted(computed) != wanted:
        twice = sorted({c for c in computed if computed.count(c) > 1})
        missing = sorted(set(wanted) - set(computed))
        return f"each node must be computed exactly once: {f'twice {twice}' if twice else f'missing {missing}'}"
    problem = _compare_runs(nodes, outputs, got, g)
    if problem:
        return problem
    (kernels, n_bytes), (best_kernels, best_bytes) = (kernels_and_bytes(got),
                                                      kernels_and_bytes(reference_fuse_graph(nodes, outputs)))
    if kernels > best_kernels or n_bytes > best_bytes:
        return (f"{kernels} kernels moving {n_bytes} B; the lesson's rule gets {best_kernels} kernels, "
                f"{best_bytes} B (was {kernels_and_bytes(nodes)[0]} kernels, {kernels_and_bytes(nodes)[1]} B)")
    return None


def check_fuse_graph(fn) -> None:
    """``fn(nodes, outputs)`` -> the nodes with every fusion group replaced by one ``fused`` node.

    Runs the result against the original on random inputs, checks each node is computed once and each fused
    loop holds fusable ops of one shape, and counts kernels and bytes (no more than the lesson's rule gives)."""
    g = rng()
    cases = []
    for label, graph in _graph_cases(g, 14):
        nodes, outputs = to_plain(graph)
        seed = int(g.integers(2**31))
        cases.append(Case(f"{label}, {len(nodes)} nodes", (nodes, outputs), expected=None,
                          check_result=lambda got, nodes=nodes, outputs=outputs, seed=seed: fusion_problem(
                              nodes, outputs, got, np.random.default_rng(seed))))
    check("fuse_graph", fn, cases, compare=lambda got, expected: True)


def reference_replace_silu(nodes: list[dict], outputs: list[str]) -> list[dict]:
    """Every mul(x, sigmoid(x)) or mul(sigmoid(x), x) whose sigmoid has no other reader and is not an output
    becomes silu(x), named as the mul; the sigmoid goes."""
    readers: dict[str, list[str]] = {}
    for node in nodes:
        for name in node["inputs"]:
            readers.setdefault(name, []).append(node["name"])
    by_name = {n["name"]: n for n in nodes}
    replaced, dropped = {}, set()
    for node in nodes:
        if node["op"] != "mul":
            continue
        a, b = node["inputs"]
        for s, x in ((a, b), (b, a)):
            if (by_name[s]["op"] == "sigmoid" and by_name[s]["inputs"][0] == x
                    and readers[s] == [node["name"]] and s not in outputs):
                replaced[node["name"]] = {"name": node["name"], "op": "silu", "inputs": [x], "shape": node["shape"]}
                dropped.add(s)
                break
    return [replaced.get(n["name"], n) for n in nodes if n["name"] not in dropped]


def silu_problem(nodes: list[dict], outputs: list[str], got, g: np.random.Generator) -> str | None:
    """Why ``got`` is not the SiLU rewrite of ``nodes`` (None when it is)."""
    problem = _as_nodes(got) or _compare_runs(nodes, outputs, got, g)
    if problem:
        return problem
    best = reference_replace_silu(nodes, outputs)
    n_silu, best_silu = (sum(n["op"] == "silu" for n in x) for x in (got, best))
    if n_silu != best_silu:
        return f"{n_silu} silu nodes; the graph has {best_silu} replaceable x * sigmoid(x)"
    kernels, best_kernels = kernels_and_bytes(got)[0], kernels_and_bytes(best)[0]
    if kernels != best_kernels:
        return f"{kernels} kernels; after the rewrite (and the sigmoids it frees) there should be {best_kernels}"
    return None


def silu_programs() -> dict[str, object]:
    """The pattern and its decoys (x, w of 8×8, b of 8)."""

    def both_orders(x, w, b):
        y = F.matmul(x, w)
        return F.sigmoid(y) * y + x * F.sigmoid(x)

    def decoys(x, w, b):  # sigmoid of another tensor; a sigmoid read twice; a sigmoid the caller wants
        y = x + 1.0
        s, t, u = F.sigmoid(x), F.sigmoid(w), F.sigmoid(y)
        return w * s + y * u + u, t * w, t

    def nested(x, w, b):  # silu(silu(x)): the second pattern's x is the first's result
        y = x * F.sigmoid(x)
        return F.sigmoid(y) * y

    return {"both orders": both_orders, "decoys": decoys, "nested": nested}


def check_replace_silu(fn) -> None:
    """``fn(nodes, outputs)`` -> the nodes with each x * sigmoid(x) replaced by one ``silu`` node.

    Runs the result against the original on random inputs and counts silu nodes and kernels."""
    g = rng()
    programs = [(label, trace(p, (8, 8), (8, 8), (8,))) for label, p in silu_programs().items()]
    programs += [(f"random program {i + 1}", random_graph(g, int(g.integers(8, 18)))) for i in range(12)]
    cases = []
    for label, graph in programs:
        nodes, outputs = to_plain(graph)
        seed = int(g.integers(2**31))
        cases.append(Case(f"{label}, {len(nodes)} nodes", (nodes, outputs), expected=None,
                          check_result=lambda got, nodes=nodes, outputs=outputs, seed=seed: silu_problem(
                              nodes, outputs, got, np.random.default_rng(seed))))
    check("replace_silu", fn, cases, compare=lambda got, expected: True)


def same_schedule(got, expected) -> bool:
    """Equal (task, worker, start, end) rows, in any order, times within 1e-9."""
    try:
        rows = sorted((int(r[0]), int(r[1]), float(r[2]), float(r[3])) for r in got if len(r) == 4)
    except (TypeError, ValueError, IndexError):
        return False
    return len(rows) == len(expected) == len(got) and all(
        a[:2] == b[:2] and abs(a[2] - b[2]) + abs(a[3] - b[3]) < 1e-9 for a, b in zip(rows, expected, strict=True))


def check_dynamic_schedule(fn) -> None:
    """``fn(durations, deps, n_workers)`` -> (task, worker, start, end) per task: the dynamic schedule of the
    lesson's rule (lowest ready task to lowest free worker; simultaneous finishes all count first).

    Fixed cases: the example, a chain, more workers than tasks, a late low-index task overtaking an early
    high-index one, two tasks finishing together, a free worker that round-robin would not pick."""
    fixed = [
        ("the example", [3, 2, 2, 1], [(0, 2), (1, 2), (1, 3)], 2),
        ("a chain", [2, 3, 1], [(0, 1), (1, 2)], 3),
        ("more workers than tasks", [4, 1, 2], [], 5),
        ("lowest index, not first ready", [2, 1, 1], [(0, 1)], 1),
        ("two finish together", [2, 2, 1, 1], [(0, 2), (1, 2)], 2),
        ("lowest free worker", [1, 3, 1, 1], [], 2),
    ]
    g = rng()
    for i in range(10):
        n = int(g.integers(4, 14))
        deps = [(a, b) for b in range(n) for a in range(b) if g.random() < 0.2]
        fixed.append((f"random graph {i + 1}", [int(d) for d in g.integers(1, 6, n)], deps, int(g.integers(1, 5))))
    cases = [Case(f"{label}: {len(d)} tasks, {len(deps)} deps, {w} workers", (d, deps, w),
                  expected=[(t, k, float(s), float(e)) for t, k, s, e in list_schedule(d, deps, w)])
             for label, d, deps, w in fixed]
    check("dynamic_schedule", fn, cases, compare=same_schedule)
