"""Checks for the exercises of 01 operators and graphs."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng
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
from mlsys_lab.units import bytes_per_element


def check_matmul_intensity(fn) -> None:
    """``fn(m, n, k, bytes_per_element)`` -> FLOP per byte of C[m,n] = A[m,k]·B[k,n],
    each matrix moved once."""
    cases = [
        Case("m=n=k=1024, fp32", (1024, 1024, 1024, 4), expected=1024 / 6),
        Case(
            "m=1, n=k=4096, bf16 (a GEMV)",
            (1, 4096, 4096, 2),
            expected=matmul_cost(1, 4096, 4096, "bf16").intensity,
        ),
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


def random_program(g: np.random.Generator, n_ops: int):
    """A random function of three inputs mixing elementwise ops, matmuls, reductions and reuse."""
    unary = [F.relu, F.exp, F.tanh, F.sigmoid, F.gelu, F.square]
    choices = g.integers(0, 7, n_ops)
    picks = g.integers(0, 1000, (n_ops, 3))

    def program(x, w, b):
        values = [x]
        extra = []
        for choice, (i, j, u) in zip(choices, picks, strict=True):
            a, c = values[i % len(values)], values[j % len(values)]
            if choice <= 1:
                values.append(unary[u % len(unary)](a))
            elif choice == 2:
                values.append(a + c)
            elif choice == 3:
                values.append(a * b)
            elif choice == 4:
                values.append(a * 0.5)
            elif choice == 5:
                values.append(F.matmul(a, w))
            else:
                extra.append(F.reduce_sum(a))
        return (values[-1], *extra[:1])

    return program


def check_can_fuse(fn) -> None:
    """``fn(graph, producer, consumer)`` -> may ``consumer`` join ``producer``'s fused kernel?"""
    cases = []
    g = rng()
    attempts = 0
    while len(cases) < 40 and attempts < 200:
        attempts += 1
        graph = trace(random_program(g, int(g.integers(3, 10))), (8, 8), (8, 8), (8,))
        for node in graph.nodes:
            for producer in dict.fromkeys(node.inputs):
                if graph.node(producer).op in ("input", "const"):
                    continue
                text = f"{graph.node(producer).op} {producer} → {node.op} {node.name}"
                cases.append(
                    Case(
                        text,
                        (graph, producer, node.name),
                        expected=reference_can_fuse(graph, producer, node.name),
                    )
                )
    check("can_fuse", fn, cases[:40])


def _random_intervals(g: np.random.Generator) -> list[Interval]:
    n = int(g.integers(3, 16))
    starts = g.integers(0, 12, n)
    return [
        Interval(f"t{i}", int(s), int(s + g.integers(0, 5)), int(g.integers(1, 64)) * 1024)
        for i, s in enumerate(starts)
    ]


def check_assign_offsets(fn) -> None:
    """``fn(intervals)`` -> {name: byte offset} with no two co-live tensors overlapping, within a budget of
    1.1 × the arena that greedy-by-size needs (and never below the lower bound, which no plan beats)."""

    def mlp(x, w1, w2):
        return F.relu(x @ w1) @ w2 + x

    tables = [
        ("hand example", [Interval("A", 0, 1, 100), Interval("B", 1, 2, 50), Interval("C", 2, 3, 100)]),
        ("MLP block", liveness(trace(mlp, (64, 256), (256, 1024), (1024, 256)))),
    ]
    g = rng()
    tables += [(f"random table {i + 1}", _random_intervals(g)) for i in range(12)]
    cases = []
    for label, intervals in tables:
        budget = int(1.1 * arena_bytes(intervals, plan_greedy_by_size(intervals, alignment=1)))

        def within(offsets, intervals=intervals, budget=budget):
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
                return (
                    f"arena {arena} B is over the budget {budget} B (lower bound "
                    f"{lower_bound_bytes(intervals)} B)"
                )
            return None

        cases.append(
            Case(f"{label}, {len(intervals)} tensors", (intervals,), expected=None, check_result=within)
        )
    check("assign_offsets", fn, cases, compare=lambda got, expected: True)
