"""Lesson 01, operators and graphs: what each operator costs, and a small graph compiler that traces a Python
function into operators, optimises the graph and runs it.

    from mlsys_lab.operators import trace, run_eager, compile_graph, gelu, matmul_cost, bound
    graph = trace(lambda x, w: gelu(x @ w) * 0.5, (64, 128), (128, 128))
    compiled = compile_graph(graph)      # attention replacement, dead code, fusion, reordering
    compiled(x, w)                       # equal to run_eager(graph, x, w)
    bound(matmul_cost(4096, 4096, 4096, "bf16"), H200, "bf16")   # 'compute-bound'

Modules, in the order of the lesson:

* :mod:`.workloads`: the three kinds of ML program as numbers (KV cache, a decode step, diffusion passes);
* :mod:`.cost`: FLOPs, bytes and intensity of each operator; memory- or compute-bound; the roofline time;
* :mod:`.catalogue`: one canonical shape per operator at one size N (the lesson's table and explorer);
* :mod:`.ir`: graph nodes and the tracer; :mod:`.functional`: the operators, eager on arrays, traced on proxies;
* :mod:`.eager`: the interpreter (one kernel per node); :mod:`.passes`: fusion, attention replacement, dead
  code, reordering; :mod:`.codegen`: the generated fused elementwise kernels;
* :mod:`.compile`: static plans and shape guards; :mod:`.schedule`: serial vs pipelined units;
* :mod:`.memory_plan`: liveness, arena planning, caching allocators;
* :mod:`.measure`: the lesson's measurements, shared with ``benchmarks/operators_fusion.py``.

The fused attention kernel the passes substitute lives in :mod:`mlsys_lab.kernels.operators.attention`.
"""

from mlsys_lab.operators.catalogue import CATALOGUE, catalogue_cost
from mlsys_lab.operators.compile import CompiledFunction, CompiledGraph, compile_function, compile_graph
from mlsys_lab.operators.cost import (
    FLOP_PER_ELEMENT,
    OP_CLASSES,
    OpCost,
    attention_cost,
    batched_matmul_cost,
    bound,
    concat_cost,
    conv2d_cost,
    conv2d_output_size,
    elementwise_cost,
    layernorm_cost,
    matmul_cost,
    matmul_tile_traffic,
    reduction_cost,
    reshape_cost,
    softmax_cost,
    time_lower_bound_seconds,
    transpose_cost,
)
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
from mlsys_lab.operators.memory_plan import (
    allocation_events,
    arena_bytes,
    live_bytes_per_step,
    liveness,
    lower_bound_bytes,
    no_reuse_bytes,
    peak_live_bytes,
    plan_conflicts,
    plan_greedy_by_size,
    simulate_caching_allocator,
    simulate_naive_allocator,
)
from mlsys_lab.operators.passes import (
    PIPELINE,
    eliminate_dead_code,
    fuse_elementwise,
    fusion_groups,
    reorder_for_memory,
    replace_attention,
)
from mlsys_lab.operators.schedule import pipeline_times
from mlsys_lab.operators.workloads import decode_step, diffusion_evaluations, kv_cache_bytes

__all__ = [
    # costs
    "OP_CLASSES", "FLOP_PER_ELEMENT", "OpCost", "elementwise_cost", "matmul_cost", "matmul_tile_traffic",
    "batched_matmul_cost", "conv2d_output_size", "conv2d_cost", "softmax_cost", "layernorm_cost",
    "reduction_cost", "transpose_cost", "reshape_cost", "concat_cost", "attention_cost", "bound",
    "time_lower_bound_seconds", "CATALOGUE", "catalogue_cost",
    # workloads
    "kv_cache_bytes", "decode_step", "diffusion_evaluations",
    # graphs: trace, run, optimise, compile
    "OP_CLASS", "Graph", "Node", "Proxy", "trace", "layout",
    "causal_mask", "exp", "gelu", "layernorm", "log", "matmul", "maximum", "reduce_sum", "relu", "sigmoid",
    "softmax", "sqrt", "square", "tanh", "transpose",
    "IMPLEMENTATIONS", "RunStats", "run_eager",
    "PIPELINE", "eliminate_dead_code", "fuse_elementwise", "fusion_groups", "replace_attention",
    "reorder_for_memory",
    "CompiledFunction", "CompiledGraph", "compile_function", "compile_graph",
    "pipeline_times",
    # memory planning
    "liveness", "live_bytes_per_step", "peak_live_bytes", "lower_bound_bytes", "no_reuse_bytes",
    "plan_greedy_by_size", "arena_bytes", "plan_conflicts", "allocation_events", "simulate_naive_allocator",
    "simulate_caching_allocator",
]
