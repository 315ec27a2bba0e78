"""A small graph compiler: trace a Python function into operators, optimise the graph, run it.

    from mlsys_lab.operators import trace, run_eager, compile_graph, relu, gelu
    graph = trace(lambda x, w: gelu(x @ w) * 0.5, (64, 128), (128, 128))
    compiled = compile_graph(graph)      # attention replacement, dead code, fusion, reordering
    compiled(x, w)                       # equal to run_eager(graph, x, w)

Modules, in the order of the lesson: :mod:`.ir` (nodes, tracing), :mod:`.functional` (operators),
:mod:`.eager` (interpreter), :mod:`.passes` (graph passes), :mod:`.codegen` (fused elementwise kernels),
:mod:`.attention` (fused attention), :mod:`.compile` (static plans and shape guards), :mod:`.schedule`
(serial vs pipelined units), :mod:`.memory` (liveness, planning, allocators), :mod:`.measure` (the lesson's
measurements, shared with ``benchmarks/operators_fusion.py``).
"""

from mlsys_lab.operators.compile import CompiledFunction, CompiledGraph, compile_function, compile_graph
from mlsys_lab.operators.eager import IMPLEMENTATIONS, RunStats, run_eager
from mlsys_lab.operators.functional import (
    causal_mask,
    exp,
    gelu,
    layernorm,
    log,
    matmul,
    maximum,
    reduce_sum,
    relu,
    sigmoid,
    softmax,
    sqrt,
    square,
    tanh,
    transpose,
)
from mlsys_lab.operators.ir import OP_CLASS, Graph, Node, Proxy, layout, trace
from mlsys_lab.operators.passes import (
    PIPELINE,
    eliminate_dead_code,
    fuse_elementwise,
    fusion_groups,
    reorder_for_memory,
    replace_attention,
)

__all__ = [
    "CompiledFunction",
    "CompiledGraph",
    "compile_function",
    "compile_graph",
    "IMPLEMENTATIONS",
    "RunStats",
    "run_eager",
    "causal_mask",
    "exp",
    "gelu",
    "layernorm",
    "log",
    "matmul",
    "maximum",
    "reduce_sum",
    "relu",
    "sigmoid",
    "softmax",
    "sqrt",
    "square",
    "tanh",
    "transpose",
    "OP_CLASS",
    "Graph",
    "Node",
    "Proxy",
    "trace",
    "layout",
    "PIPELINE",
    "eliminate_dead_code",
    "fuse_elementwise",
    "fusion_groups",
    "replace_attention",
    "reorder_for_memory",
]
