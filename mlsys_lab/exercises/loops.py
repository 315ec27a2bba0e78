"""Checks for the exercises of 02_loops."""

from __future__ import annotations

import itertools

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.loops.cache_model import LOOP_ORDERS, misses_per_iteration
from mlsys_lab.loops.dependence import legal_orders, lexicographically_positive


def _random_dependences(g, depth: int, count: int) -> list[tuple[int, ...]]:
    """``count`` lexicographically positive distance vectors with entries in -2..2."""
    vectors = [v for v in itertools.product(range(-2, 3), repeat=depth) if lexicographically_positive(v)]
    return [vectors[int(i)] for i in g.choice(len(vectors), size=count, replace=False)]


def _same_orders(got, expected) -> bool:
    try:
        return sorted(tuple(int(x) for x in order) for order in got) == sorted(expected)
    except TypeError:
        return False


def check_legal_orders(fn) -> None:
    """``fn(vectors)`` -> every legal loop order (tuples of loop indices, outermost first), any sequence."""
    examples = [
        ("matmul: no carried dependence", [(0, 0, 1)]),
        ("a[i][j] = a[i-1][j+1]", [(1, -1)]),
        ("stencil in place", [(1, 0), (0, 1)]),
        ("DP with diagonal", [(1, 0), (0, 1), (1, 1)]),
        ("3-deep, mixed signs", [(1, -1, 0), (0, 1, -1)]),
    ]
    cases = [Case(label, (vectors,), expected=legal_orders(vectors)) for label, vectors in examples]
    g = rng()
    for _ in range(10):
        depth = int(g.integers(2, 4))
        vectors = _random_dependences(g, depth, int(g.integers(1, 4)))
        cases.append(Case(f"vectors={vectors}", (vectors,), expected=legal_orders(vectors)))
    check("legal_orders", fn, cases, compare=_same_orders)


def check_misses_per_iteration(fn) -> None:
    """``fn(order, elements_per_line)`` -> total cache misses per innermost iteration (CS:APP model)."""
    cases = [Case("ijk, 8 per line", ("ijk", 8), expected=1.125),
             Case("ikj, 8 per line", ("ikj", 8), expected=0.25),
             Case("jki, 4 per line", ("jki", 4), expected=2.0)]
    g = rng()
    for _ in range(9):
        order = LOOP_ORDERS[int(g.integers(len(LOOP_ORDERS)))]
        per_line = int(g.choice([1, 2, 4, 8, 16, 32]))
        cases.append(Case(f"{order}, {per_line} per line", (order, per_line),
                          expected=misses_per_iteration(order, per_line)["total"]))
    check("misses_per_iteration", fn, cases)
