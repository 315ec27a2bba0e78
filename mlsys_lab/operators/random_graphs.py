"""Random traced programs: graphs with every shape of trouble a graph pass meets.

The exercises' checks run passes on these, and the tests use them to compare passes with eager execution.
Each program reads a matrix ``x`` (n × n), a weight ``w`` (n × n) and a vector ``b`` (n,), and
mixes chains of elementwise ops, values read twice (``a * a``, diamonds), reductions to vectors and
elementwise ops on those vectors (mixed shapes), matmuls, constants, SiLU patterns ``a * sigmoid(a)``
with decoys, and intermediate values returned as extra graph outputs. Dead code is removed.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.operators import functional as F
from mlsys_lab.operators.ir import Graph, trace
from mlsys_lab.operators.passes import eliminate_dead_code
from mlsys_lab.validation import check_int, check_type

UNARY = (F.relu, F.exp, F.tanh, F.sigmoid, F.gelu, F.square)


def random_graph(g: np.random.Generator, n_ops: int, n: int = 8) -> Graph:
    """A random program of about ``n_ops`` operators, traced with x and w of n × n and b of n."""
    check_type("g", g, np.random.Generator)
    n_ops = check_int("n_ops", n_ops, low=1, high=10_000)
    n = check_int("n", n, low=1, high=4096)
    kinds = g.integers(0, 14, n_ops)
    picks = g.integers(0, 10**6, (n_ops, 3))

    def program(x, w, b):
        mats, vecs, extra = [x], [b], []
        for kind, (i, j, u) in zip(kinds, picks, strict=True):
            a = mats[-1 - i % min(len(mats), 3)]  # mostly the latest values: long chains
            c, v = mats[j % len(mats)], vecs[-1 - j % min(len(vecs), 2)]
            if kind <= 2:
                mats.append(UNARY[u % len(UNARY)](a))
            elif kind == 3:
                mats.append(a + c)
            elif kind == 4:
                mats.append(a * a)  # one reader that reads twice
            elif kind == 5:
                mats.append(a * 0.5 if u % 2 else 1.0 - a)
            elif kind == 6:
                mats.append(F.matmul(a, w))
            elif kind == 7:
                vecs.append(F.reduce_sum(a))  # a vector: shapes now differ
            elif kind == 8:
                vecs.append(UNARY[u % len(UNARY)](v) if u % 3 else v * v)
            elif kind == 9:
                mats.append(a * v)  # matrix (op) vector: broadcast, mixed shapes
            elif kind == 10:
                s = F.sigmoid(a)
                mats.append(a * s if u % 2 else s * a)  # the SiLU pattern, both orders
            elif kind == 11:
                s = F.sigmoid(a)
                if u % 3 == 0:
                    mats.append(c * s)  # a decoy: sigmoid of a, times c
                elif u % 3 == 1:
                    mats.append(a * s + s)  # the sigmoid is read twice
                else:
                    mats.append(s * a)
                    extra.append(s)  # the sigmoid is a graph output
            elif kind == 12:
                extra.append(a)  # an intermediate the caller also wants
            else:
                mats.append(F.exp(a) + a)  # a diamond
        outs = [mats[-1], *extra[:2]]
        if len(vecs) > 1:
            outs.append(vecs[-1])
        unique = list({id(o): o for o in outs if o.node.op != "input"}.values())
        return tuple(unique) if unique else F.relu(x)

    return eliminate_dead_code(trace(program, (n, n), (n, n), (n,)))


def random_inputs(g: np.random.Generator, graph: Graph) -> dict[str, np.ndarray]:
    """Random float32 arrays in [-1, 1] for the inputs of ``graph``, by name."""
    check_type("g", g, np.random.Generator)
    check_type("graph", graph, Graph)
    return {name: g.uniform(-1, 1, graph.node(name).shape).astype(np.float32) for name in graph.inputs}
