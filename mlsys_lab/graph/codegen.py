"""Code generation for fused nodes: one loop for a chain of elementwise ops, one kernel for attention.

Fusing ``y = tanh(a * b + c)`` means generating *one* kernel that reads a, b, c once and writes y once,
instead of three kernels that each write an intermediate to memory and read it back (TorchInductor and
XLA generate such loops; here the CPU target is a numba loop, the GPU target a CuPy ``ElementwiseKernel``):

    for i, j:                       # one pass over the output
        v1 = a[i, j] * b[i, j]      # stays in a register
        v2 = v1 + c[i, j]
        y[i, j] = math.tanh(v2)

Kernels are cached by their source text: the same chain compiles once per process.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mlsys_lab import backend
from mlsys_lab.backend import xp
from mlsys_lab.graph.ir import Node

# Scalar expression templates per op, for the CPU (numba, Python syntax) and GPU (CUDA C, type T) targets.
CPU_TEMPLATES = {
    "neg": "-({0})", "exp": "math.exp({0})", "log": "math.log({0})", "tanh": "math.tanh({0})",
    "sqrt": "math.sqrt({0})", "square": "({0}) * ({0})", "relu": "max({0}, 0.0)",
    "sigmoid": "1.0 / (1.0 + math.exp(-({0})))",
    "gelu": "0.5 * {0} * (1.0 + math.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))",
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "maximum": "max({0}, {1})",
}
GPU_TEMPLATES = {
    "neg": "-({0})", "exp": "exp({0})", "log": "log({0})", "tanh": "tanh({0})", "sqrt": "sqrt({0})",
    "square": "({0}) * ({0})", "relu": "max({0}, (T)0)", "sigmoid": "(T)1 / ((T)1 + exp(-({0})))",
    "gelu": "(T)0.5 * {0} * ((T)1 + tanh((T)0.7978845608028654 * ({0} + (T)0.044715 * {0} * {0} * {0})))",
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "maximum": "max({0}, {1})",
}

_CACHE: dict[str, Any] = {}


@dataclass(frozen=True)
class FusedKernel:
    """A generated kernel: call it with the group's input arrays; ``source`` is the generated code."""

    source: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shape: tuple[int, ...]
    run: Callable[..., Any]

    def __call__(self, *arrays: Any) -> Any:
        return self.run(*arrays)


def _literal(value: float, target: str) -> str:
    if math.isfinite(value):
        return f"{value!r}" if target == "cpu" else f"((T){value!r})"
    sign = "-" if value < 0 else ""
    return f"{sign}math.inf" if target == "cpu" else f"({sign}INFINITY)"


def _body(nodes: list[Node], consts: dict[str, float], inputs: tuple[str, ...], target: str) -> list[str]:
    """Statements computing every node of the group into a local variable ``v_<name>``."""
    templates = CPU_TEMPLATES if target == "cpu" else GPU_TEMPLATES
    operand = {name: f"x{i}" for i, name in enumerate(inputs)}
    operand.update({name: _literal(value, target) for name, value in consts.items()})
    lines = []
    for node in nodes:
        expr = templates[node.op].format(*(operand[name] for name in node.inputs))
        operand[node.name] = f"v_{node.name}"
        lines.append(f"v_{node.name} = {expr}" if target == "cpu" else f"T v_{node.name} = {expr};")
    return lines


def elementwise_kernel(nodes: list[Node], consts: dict[str, float], inputs: tuple[str, ...],
                       outputs: tuple[str, ...], shape: tuple[int, ...], dtype: str = "float32",
                       target: str | None = None) -> FusedKernel:
    """Generate one kernel computing ``nodes`` (in order) elementwise over ``shape``.

    ``inputs`` are the tensors read from memory (broadcast to ``shape``), ``consts`` scalar constants
    inlined into the code, ``outputs`` the nodes written back. ``target``: "cpu" (numba) or "gpu" (CuPy),
    default: the backend's.
    """
    target = target or ("gpu" if backend.on_gpu else "cpu")
    if target == "gpu":
        return _gpu_kernel(nodes, consts, inputs, outputs, shape)
    return _cpu_kernel(nodes, consts, inputs, outputs, shape, dtype)


def _cpu_kernel(nodes, consts, inputs, outputs, shape, dtype) -> FusedKernel:
    args = [f"x{i}_2d" for i in range(len(inputs))] + [f"out{i}" for i in range(len(outputs))]
    lines = [f"def fused_kernel({', '.join(args)}):",
             "    for i in range(out0.shape[0]):",
             "        for j in range(out0.shape[1]):"]
    lines += [f"            x{i} = x{i}_2d[i, j]" for i in range(len(inputs))]
    lines += ["            " + line for line in _body(nodes, consts, inputs, "cpu")]
    lines += [f"            out{i}[i, j] = v_{name}" for i, name in enumerate(outputs)]
    source = "\n".join(lines)
    if source not in _CACHE:
        import numba  # noqa: PLC0415  (numba is imported only when a kernel is generated)

        namespace: dict[str, Any] = {"math": math}
        exec(compile(source, "<fused_kernel>", "exec"), namespace)  # noqa: S102  (our own generated code)
        _CACHE[source] = numba.njit(cache=False)(namespace["fused_kernel"])
    jitted = _CACHE[source]
    cols = shape[-1] if shape else 1
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1

    def run(*arrays):
        views = [np.broadcast_to(np.asarray(a, dtype=dtype), shape).reshape(rows, cols) for a in arrays]
        outs = [np.empty(shape, dtype=dtype) for _ in outputs]
        jitted(*views, *[o.reshape(rows, cols) for o in outs])
        return tuple(outs) if len(outs) > 1 else outs[0]

    return FusedKernel(source, tuple(inputs), tuple(outputs), tuple(shape), run)


def _gpu_kernel(nodes, consts, inputs, outputs, shape) -> FusedKernel:
    body = _body(nodes, consts, inputs, "gpu")
    body += [f"out{i} = v_{name};" for i, name in enumerate(outputs)]
    in_params = ", ".join(f"T x{i}" for i in range(len(inputs)))
    out_params = ", ".join(f"T out{i}" for i in range(len(outputs)))
    operation = "\n".join(body)
    source = f"// in: {in_params}\n// out: {out_params}\n{operation}"
    if source not in _CACHE:
        name = "fused_" + hashlib.sha1(source.encode()).hexdigest()[:12]
        _CACHE[source] = xp.ElementwiseKernel(in_params, out_params, operation, name)
    kernel = _CACHE[source]

    def run(*arrays):
        outs = [xp.empty(shape, dtype=xp.float32) for _ in outputs]
        kernel(*[xp.broadcast_to(a, shape) for a in arrays], *outs)
        return tuple(outs) if len(outs) > 1 else outs[0]

    return FusedKernel(source, tuple(inputs), tuple(outputs), tuple(shape), run)


# --- fused attention ---------------------------------------------------------------------------------

ATTENTION_CPU_SOURCE = '''
def attention_rows(q, k, v, out, scale, causal):
    """One query row at a time: its scores live in a length-S buffer, never in an S×S matrix."""
    bh, s_q, d = q.shape
    s_k = k.shape[1]
    scores = np.empty(s_k, dtype=np.float32)
    for b in range(bh):
        for i in range(s_q):
            j_end = min(s_k, i + 1 + s_k - s_q) if causal else s_k
            row_max = -np.inf
            for j in range(j_end):
                dot = np.float32(0.0)
                for t in range(d):
                    dot += q[b, i, t] * k[b, j, t]
                scores[j] = dot * scale
                row_max = max(row_max, scores[j])
            total = np.float32(0.0)
            for j in range(j_end):
                scores[j] = np.exp(scores[j] - row_max)
                total += scores[j]
            for t in range(d):
                out[b, i, t] = 0.0
            for j in range(j_end):
                p = scores[j] / total
                for t in range(d):
                    out[b, i, t] += p * v[b, j, t]
'''


def fused_attention(q: Any, k: Any, v: Any, scale: float, causal: bool = False) -> Any:
    """softmax(q·kᵀ·scale [+ causal mask])·v without materialising the S×S score matrix.

    Shapes: q [..., S_q, D], k and v [..., S_k, D] -> [..., S_q, D]. On the GPU a CUDA kernel with one warp
    per query row and an online softmax (Milakov & Gimelshein 2018; the inner loop of FlashAttention,
    Dao et al. 2022); on the CPU a numba loop with one row of scores at a time.
    """
    lead, (s_q, d), s_k = q.shape[:-2], q.shape[-2:], k.shape[-2]
    bh = int(np.prod(lead, dtype=np.int64)) if lead else 1
    q3 = xp.ascontiguousarray(q.reshape(bh, s_q, d), dtype=xp.float32)
    k3 = xp.ascontiguousarray(k.reshape(bh, s_k, d), dtype=xp.float32)
    v3 = xp.ascontiguousarray(v.reshape(bh, s_k, d), dtype=xp.float32)
    out = xp.empty((bh, s_q, d), dtype=xp.float32)
    if backend.on_gpu:
        _attention_gpu(q3, k3, v3, out, scale, causal)
    else:
        _attention_cpu()(q3, k3, v3, out, np.float32(scale), bool(causal))
    return out.reshape(*lead, s_q, d)


def _attention_cpu():
    if "attention_cpu" not in _CACHE:
        import numba  # noqa: PLC0415

        namespace: dict[str, Any] = {"np": np}
        exec(compile(ATTENTION_CPU_SOURCE, "<attention_rows>", "exec"), namespace)  # noqa: S102
        _CACHE["attention_cpu"] = numba.njit(fastmath=True, cache=False)(namespace["attention_rows"])
    return _CACHE["attention_cpu"]


def _attention_gpu(q3, k3, v3, out, scale: float, causal: bool) -> None:
    from mlsys_lab.kernels.loader import blocks_for, kernel  # noqa: PLC0415

    bh, s_q, d = q3.shape
    if d > 128:
        raise ValueError(f"head_dim must be <= 128 for the GPU attention kernel; got {d}")
    warps_per_block = 4
    launch = kernel("attention_rowwise.cu", "attention_rowwise")
    launch((blocks_for(bh * s_q, warps_per_block),), (32 * warps_per_block,),
           (q3, k3, v3, out, np.int32(bh), np.int32(s_q), np.int32(k3.shape[1]), np.int32(d),
            np.float32(scale), np.int32(bool(causal))))
