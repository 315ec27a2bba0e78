"""Measurements of the lesson, shared by the notebook and ``benchmarks/operators_fusion.py``.

Each function builds its inputs with a fixed seed, checks that the optimised run equals the eager one,
times both with :func:`mlsys_lab.timing.benchmark` (CUDA events on a GPU, perf_counter on a CPU; medians
after warm-up) and returns a plain dict of numbers (seconds, bytes) ready for a table or a JSON file.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from mlsys_lab import backend
from mlsys_lab.backend import xp
from mlsys_lab.operators.compile import compile_graph
from mlsys_lab.operators.eager import run_eager
from mlsys_lab.operators.functional import causal_mask, matmul, relu, softmax, tanh, transpose
from mlsys_lab.operators.ir import trace
from mlsys_lab.operators.passes import fuse_elementwise, replace_attention
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import check_int, max_relative_error


def elementwise_chain(a, b, c):
    """The lesson's chain: y = relu(a·b + c)·0.5 + 1, five cheap elementwise kernels when run eagerly."""
    return relu(a * b + c) * 0.5 + 1.0


def tanh_chain(a, b, c):
    """The same chain with tanh instead of relu: a transcendental per element."""
    return tanh(a * b + c) * 0.5 + 1.0


def attention_block(q, k, v):
    """Causal attention written as six operators: transpose, Q·Kᵀ, scale, mask, softmax, ·V."""
    return softmax(causal_mask(matmul(q, transpose(k)) * (1.0 / np.sqrt(q.shape[-1])))) @ v


def _random(shape: tuple[int, ...], seed: int) -> Any:
    return xp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def copy_bandwidth_bytes_per_s(n_elements: int, repeat: int = 10) -> float:
    """Device copy dst[:] = src[:] of float32: (bytes read + bytes written) / median time."""
    n = check_int("n_elements", n_elements, low=1)
    src = xp.ones(n, dtype=xp.float32)
    dst = xp.empty_like(src)
    timing = benchmark(lambda: xp.copyto(dst, src), warmup=2, repeat=repeat)
    return 2 * src.nbytes / timing.median


def measure_fusion(n_elements: int, repeat: int = 10, transcendental: bool = False) -> dict[str, float]:
    """Eager (5 kernels) vs fused (1 generated kernel) on the chain over ``n_elements`` = rows × 1024
    (:func:`elementwise_chain`, or :func:`tanh_chain` when ``transcendental``)."""
    n = check_int("n_elements", n_elements, low=1024)
    rows = n // 1024
    graph = trace(tanh_chain if transcendental else elementwise_chain, (rows, 1024), (rows, 1024), (1024,))
    fused = fuse_elementwise(graph)
    args = (_random((rows, 1024), 1), _random((rows, 1024), 2), _random((1024,), 3))
    error = max_relative_error(run_eager(fused, *args), run_eager(graph, *args))
    eager_s = benchmark(lambda: run_eager(graph, *args), warmup=2, repeat=repeat).median
    fused_s = benchmark(lambda: run_eager(fused, *args), warmup=2, repeat=repeat).median
    return {
        "n_elements": rows * 1024,
        "eager_kernels": graph.n_kernels,
        "fused_kernels": fused.n_kernels,
        "eager_bytes": graph.bytes_moved(),
        "fused_bytes": fused.bytes_moved(),
        "eager_seconds": eager_s,
        "fused_seconds": fused_s,
        "max_relative_error": error,
    }


def _long_chain(n_ops: int):
    def chain(x):
        for i in range(n_ops):
            x = x * 1.0001 if i % 2 == 0 else x + 0.5
        return x

    return chain


def measure_dispatch(n_ops: int = 32, n_elements: int = 1024, repeat: int = 20) -> dict[str, float]:
    """Per-kernel overhead: a chain of ``n_ops`` tiny elementwise ops run eagerly (one call each) through
    the interpreter, through the static plan (same kernels, no interpreting), and fused into one kernel."""
    n_ops = check_int("n_ops", n_ops, low=1)
    n = check_int("n_elements", n_elements, low=1)
    graph = trace(_long_chain(n_ops), (n,))
    plan = compile_graph(graph, passes=())
    fused = compile_graph(graph, passes=(fuse_elementwise,))
    x = _random((n,), 4)
    error = max_relative_error(fused(x), run_eager(graph, x))
    eager_s = benchmark(lambda: run_eager(graph, x), warmup=3, repeat=repeat).median
    plan_s = benchmark(lambda: plan(x), warmup=3, repeat=repeat).median
    fused_s = benchmark(lambda: fused(x), warmup=3, repeat=repeat).median
    return {
        "n_ops": n_ops,
        "n_elements": n,
        "interpreted_seconds": eager_s,
        "static_plan_seconds": plan_s,
        "fused_seconds": fused_s,
        "interpreted_seconds_per_op": eager_s / n_ops,
        "static_plan_seconds_per_op": plan_s / n_ops,
        "max_relative_error": error,
    }


def measure_attention(seq_len: int, heads: int = 8, head_dim: int = 64, repeat: int = 5) -> dict[str, float]:
    """Unfused (6 kernels, S×S scores in memory) vs fused attention for q, k, v of [heads, S, D]."""
    s = check_int("seq_len", seq_len, low=2)
    shape = (check_int("heads", heads, low=1), s, check_int("head_dim", head_dim, low=1, high=128))
    graph = trace(attention_block, shape, shape, shape)
    fused = replace_attention(graph)
    args = tuple(_random(shape, seed) for seed in (5, 6, 7))
    error = max_relative_error(run_eager(fused, *args), run_eager(graph, *args))
    unfused_s = benchmark(lambda: run_eager(graph, *args), warmup=1, repeat=repeat).median
    fused_s = benchmark(lambda: run_eager(fused, *args), warmup=1, repeat=repeat).median
    extra = {}
    if backend.on_gpu:  # the simpler kernel without shared-memory tiles, for comparison
        from mlsys_lab.kernels.operators.attention import _attention_gpu  # noqa: PLC0415

        out = xp.empty_like(args[0])
        scale = float(1.0 / np.sqrt(shape[2]))
        untiled = benchmark(
            lambda: _attention_gpu(*args, out, scale, True, tiled=False), warmup=1, repeat=repeat
        )
        extra["fused_untiled_seconds"] = untiled.median
        extra["untiled_max_relative_error"] = max_relative_error(out, run_eager(graph, *args))
    return {
        **extra,
        "seq_len": s,
        "heads": shape[0],
        "head_dim": shape[2],
        "unfused_kernels": graph.n_kernels,
        "fused_kernels": fused.n_kernels,
        "unfused_bytes": graph.bytes_moved(),
        "fused_bytes": fused.bytes_moved(),
        "unfused_seconds": unfused_s,
        "fused_seconds": fused_s,
        "max_relative_error": error,
    }


def _seconds_per_call(fn, count: int, rounds: int = 5) -> float:
    """Host time per call of ``fn`` over ``count`` back-to-back calls, median of ``rounds`` (device synced
    before each round, so no earlier work is counted)."""
    samples = []
    for _ in range(rounds):
        backend.sync()
        start = time.perf_counter()
        for _ in range(count):
            fn()
        samples.append((time.perf_counter() - start) / count)
    return float(np.median(samples))


def measure_allocation(n_bytes: int, repeat: int = 50) -> dict[str, float]:
    """Cost of one allocation + free of ``n_bytes`` from the system against one from a pool (host time per
    allocation, ``repeat`` back-to-back pairs, median of 5 rounds; the method of lesson 04's record).

    GPU: ``cudaMalloc`` + ``cudaFree`` (``cupy.cuda.runtime``, no pool in between) against ``cupy.empty`` +
    release, which CuPy's memory pool serves from the block the previous iteration returned. CPU: a new
    NumPy array whose pages are touched (``fill``: the system maps memory on first touch) against refilling
    an array the program already holds. Both sides of each pair do the same work apart from the allocation.
    """
    n = check_int("n_bytes", n_bytes, low=4)
    if backend.on_gpu:
        runtime = xp.cuda.runtime

        def fresh():
            runtime.free(runtime.malloc(n))

        def pooled():
            block = xp.empty(n // 4, dtype=xp.float32)  # the pool's cached block after the first call
            del block

        pooled()  # the pool now holds one block of this size
    else:

        def fresh():
            np.empty(n // 4, dtype=np.float32).fill(0.0)

        held = np.empty(n // 4, dtype=np.float32)

        def pooled():
            held.fill(0.0)

    count = check_int("repeat", repeat, low=1)
    return {"n_bytes": n, "fresh_seconds": _seconds_per_call(fresh, count),
            "pooled_seconds": _seconds_per_call(pooled, count),
            "method": f"host time per allocate + free, {count} back-to-back pairs, median of 5 rounds"}


def measure_launch(n_ops: int = 64, n_elements: int = 1024) -> dict[str, Any]:
    """Three costs that "launch overhead" mixes up, per operator of a chain of ``n_ops`` tiny ``tanh`` ops:

    * ``python_dispatch_seconds``: the host time to issue one backend call from Python (on a CPU NumPy also
      runs it, ``n_elements`` tanh included; on a GPU CuPy only enqueues it: argument parsing, kernel lookup,
      the launch call);
    * ``interpreter_seconds``: the same chain through :func:`run_eager` (graph walking on top of dispatch);
    * GPU only: ``gpu_seconds``, the device time per kernel of the chain issued from Python (CUDA events:
      bounded below by the launch latency, the gap between back-to-back kernels) and
      ``graph_replay_seconds``, the device time per kernel when the whole chain is captured once into a
      CUDA Graph and replayed with one launch (no Python, no per-kernel launch call). On a CPU they are None.
    """
    n_ops = check_int("n_ops", n_ops, low=1)
    n = check_int("n_elements", n_elements, low=1)
    graph = trace(_long_chain(n_ops), (n,))
    x = _random((n,), 4)
    out = xp.empty_like(x)

    def issue():
        for _ in range(n_ops):
            xp.tanh(x, out=out)

    result: dict[str, Any] = {"n_ops": n_ops, "n_elements": n,
                              "python_dispatch_seconds": _seconds_per_call(issue, 20) / n_ops,
                              "interpreter_seconds": _seconds_per_call(lambda: run_eager(graph, x), 20) / n_ops,
                              "gpu_seconds": None, "graph_replay_seconds": None}
    if backend.on_gpu:
        result["gpu_seconds"] = benchmark(issue, warmup=3, repeat=20).median / n_ops
        stream = xp.cuda.Stream(non_blocking=True)
        with stream:  # capture needs a stream of its own; the timing events go on the same stream
            issue()  # compile and cache the kernel outside the capture
            stream.begin_capture()
            issue()
            cuda_graph = stream.end_capture()
            replay = benchmark(lambda: cuda_graph.launch(stream), warmup=3, repeat=20)
        result["graph_replay_seconds"] = replay.median / n_ops
    return result
