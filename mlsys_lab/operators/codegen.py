"""Code generation for fused nodes: one generated loop (CPU) or kernel (GPU) for a chain of elementwise ops.

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
from mlsys_lab.operators.ir import Node
from mlsys_lab.validation import check_choice, check_int, check_sequence, check_str, check_type

# Scalar expression templates per op, for the CPU (numba, Python syntax) and GPU (CUDA C, type T) targets.
CPU_TEMPLATES = {
    "neg": "-({0})",
    "exp": "math.exp({0})",
    "log": "math.log({0})",
    "tanh": "math.tanh({0})",
    "sqrt": "math.sqrt({0})",
    "square": "({0}) * ({0})",
    "relu": "max({0}, 0.0)",
    "sigmoid": "1.0 / (1.0 + math.exp(-({0})))",
    "gelu": "0.5 * {0} * (1.0 + math.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "maximum": "max({0}, {1})",
}
GPU_TEMPLATES = {
    "neg": "-({0})",
    "exp": "exp({0})",
    "log": "log({0})",
    "tanh": "tanh({0})",
    "sqrt": "sqrt({0})",
    "square": "({0}) * ({0})",
    "relu": "max({0}, (T)0)",
    "sigmoid": "(T)1 / ((T)1 + exp(-({0})))",
    "gelu": "(T)0.5 * {0} * ((T)1 + tanh((T)0.7978845608028654 * ({0} + (T)0.044715 * {0} * {0} * {0})))",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "maximum": "max({0}, {1})",
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

    def __post_init__(self) -> None:
        check_str("source", self.source)
        for name in ("inputs", "outputs"):
            for item in check_type(name, getattr(self, name), tuple):
                check_str(name, item)
        for size in check_type("shape", self.shape, tuple):
            check_int("shape", size, low=0)
        if not callable(self.run):
            raise TypeError(f"run must be a callable (the compiled kernel); got {self.run!r:.40}")

    def __call__(self, *arrays: Any) -> Any:
        return self.run(*arrays)


def _literal(value: float, target: str) -> str:
    if math.isfinite(value):
        return f"{value!r}" if target == "cpu" else f"((T){value!r})"
    sign = "-" if value < 0 else ""
    return f"{sign}math.inf" if target == "cpu" else f"({sign}__int_as_float(0x7f800000))"


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


def elementwise_kernel(
    nodes: list[Node],
    consts: dict[str, float],
    inputs: tuple[str, ...],
    input_shapes: list[tuple[int, ...]],
    outputs: tuple[str, ...],
    shape: tuple[int, ...],
    dtype: str = "float32",
    target: str | None = None,
) -> FusedKernel:
    """Generate one kernel computing ``nodes`` (in order) elementwise over ``shape``.

    ``inputs`` are the tensors read from memory (of ``input_shapes``, broadcast to ``shape``),
    ``consts`` scalar constants
    inlined into the code, ``outputs`` the nodes written back. ``target``: "cpu" (numba) or "gpu" (CuPy),
    default: the backend's.
    """
    for node in check_sequence("nodes", nodes, min_size=1):
        check_type("nodes", node, Node)
    check_type("consts", consts, dict)
    for name, value in (("inputs", inputs), ("outputs", outputs)):
        for item in check_sequence(name, value, min_size=1 if name == "outputs" else 0):
            check_str(name, item)
    shapes = check_sequence("input_shapes", input_shapes)
    if len(shapes) != len(inputs):
        raise ValueError(f"input_shapes must hold one shape per entry of inputs ({len(inputs)}); got {len(shapes)}")
    for s in (*shapes, check_sequence("shape", shape)):
        for size in check_sequence("shape", s):
            check_int("shape", size, low=0)
    check_choice("dtype", dtype, ("float32", "float64"))
    check_choice("target", target, (None, "cpu", "gpu"))
    target = target or ("gpu" if backend.on_gpu else "cpu")
    if target == "gpu":
        return _gpu_kernel(nodes, consts, inputs, outputs, shape, input_shapes)
    return _cpu_kernel(nodes, consts, inputs, outputs, shape, dtype, input_shapes)


def _index_pattern(input_shape: tuple[int, ...], shape: tuple[int, ...], cols: int) -> str:
    """How the loop reads an input: ``full`` [i, j], ``row`` [j] (a bias over the last
    axis), else ``broadcast``."""
    if tuple(input_shape) == tuple(shape):
        return "full"
    if len(input_shape) >= 1 and input_shape[-1] == cols and all(d == 1 for d in input_shape[:-1]):
        return "row"
    return "broadcast"


def _cpu_kernel(nodes, consts, inputs, outputs, shape, dtype, input_shapes) -> FusedKernel:
    cols = shape[-1] if shape else 1
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    patterns = [_index_pattern(s, shape, cols) for s in input_shapes]
    args = [f"in{i}" for i in range(len(inputs))] + [f"out{i}" for i in range(len(outputs))]
    lines = [
        f"def fused_kernel({', '.join(args)}):",
        "    for i in range(out0.shape[0]):",
        "        for j in range(out0.shape[1]):",
    ]
    lines += [
        f"            x{i} = in{i}[j]" if p == "row" else f"            x{i} = in{i}[i, j]"
        for i, p in enumerate(patterns)
    ]
    lines += ["            " + line for line in _body(nodes, consts, inputs, "cpu")]
    lines += [f"            out{i}[i, j] = v_{name}" for i, name in enumerate(outputs)]
    source = "\n".join(lines)
    if source not in _CACHE:
        import numba  # noqa: PLC0415  (numba is imported only when a kernel is generated)

        namespace: dict[str, Any] = {"math": math}
        exec(compile(source, "<fused_kernel>", "exec"), namespace)  # noqa: S102  (our own generated code)
        # error_model="numpy": no ZeroDivisionError checks, so the loop can be vectorised (SIMD).
        _CACHE[source] = numba.njit(cache=False, error_model="numpy")(namespace["fused_kernel"])
    jitted = _CACHE[source]

    def view(array, pattern):
        array = np.asarray(array, dtype=dtype)
        if pattern == "full":
            return np.ascontiguousarray(array).reshape(rows, cols)
        if pattern == "row":
            return np.ascontiguousarray(array).reshape(cols)
        return np.broadcast_to(array, shape).reshape(rows, cols)

    def run(*arrays):
        views = [view(a, p) for a, p in zip(arrays, patterns, strict=True)]
        outs = [np.empty(shape, dtype=dtype) for _ in outputs]
        jitted(*views, *[o.reshape(rows, cols) for o in outs])
        return tuple(outs) if len(outs) > 1 else outs[0]

    return FusedKernel(source, tuple(inputs), tuple(outputs), tuple(shape), run)


def _gpu_kernel(nodes, consts, inputs, outputs, shape, input_shapes) -> FusedKernel:
    """A CUDA kernel over float4 vectors (16-byte loads and stores keep enough bytes in flight to reach the
    copy bandwidth, which one float per thread does not), grid-stride loop; a bias over the last axis is
    read as b[i % cols]. Falls back to a CuPy ElementwiseKernel when the size is not a multiple of 4."""
    cols = shape[-1] if shape else 1
    patterns = [_index_pattern(s, shape, cols) for s in input_shapes]
    params = [
        f"const float* __restrict__ b{i}" if p == "row" else f"const float4* __restrict__ in{i}"
        for i, p in enumerate(patterns)
    ]
    params += [f"float4* __restrict__ out{i}" for i in range(len(outputs))]
    loads = [f"        const float4 q{i} = in{i}[v];" for i, p in enumerate(patterns) if p != "row"]
    lane = []
    for i, p in enumerate(patterns):
        lane.append(
            f"            const T x{i} = b{i}[(v * 4 + c) % {cols}];"
            if p == "row"
            else f"            const T x{i} = reinterpret_cast<const float*>(&q{i})[c];"
        )
    lane += ["            " + line for line in _body(nodes, consts, inputs, "gpu")]
    lane += [f"            reinterpret_cast<float*>(&r{i})[c] = v_{name};" for i, name in enumerate(outputs)]
    source = "\n".join(
        [
            "typedef float T;",
            f'extern "C" __global__ void fused_kernel({", ".join(params)}, long long n_vectors) {{',
            "    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < n_vectors;",
            "         v += (long long)gridDim.x * blockDim.x) {",
            *loads,
            *[f"        float4 r{i};" for i in range(len(outputs))],
            "#pragma unroll",
            "        for (int c = 0; c < 4; ++c) {",
            *lane,
            "        }",
            *[f"        out{i}[v] = r{i};" for i in range(len(outputs))],
            "    }",
            "}",
        ]
    )
    if source not in _CACHE:
        _CACHE[source] = xp.RawKernel(source, "fused_kernel", options=("-std=c++17",))
    kernel = _CACHE[source]
    size = int(np.prod(shape, dtype=np.int64))
    if size % 4:
        return _gpu_elementwise_kernel(nodes, consts, inputs, outputs, shape, patterns, cols, source)

    def flat(array, pattern):
        if pattern == "row":
            return xp.ascontiguousarray(array, dtype=xp.float32).reshape(cols)
        array = xp.ascontiguousarray(xp.broadcast_to(array, shape), dtype=xp.float32).reshape(size)
        return array if array.data.ptr % 16 == 0 else array.copy()  # float4 loads need 16-byte alignment

    def run(*arrays):
        outs = [xp.empty(shape, dtype=xp.float32) for _ in outputs]
        n_vectors = size // 4
        threads = 256
        blocks = min((n_vectors + threads - 1) // threads, 1 << 20)
        kernel(
            (blocks,),
            (threads,),
            (*[flat(a, p) for a, p in zip(arrays, patterns, strict=True)], *outs, np.int64(n_vectors)),
        )
        return tuple(outs) if len(outs) > 1 else outs[0]

    return FusedKernel(source, tuple(inputs), tuple(outputs), tuple(shape), run)


def _gpu_elementwise_kernel(nodes, consts, inputs, outputs, shape, patterns, cols, raw_source) -> FusedKernel:
    params = [f"raw T b{i}" if p == "row" else f"T x{i}" for i, p in enumerate(patterns)]
    body = [f"T x{i} = b{i}[i % {cols}];" for i, p in enumerate(patterns) if p == "row"]
    body += _body(nodes, consts, inputs, "gpu")
    body += [f"out{i} = v_{name};" for i, name in enumerate(outputs)]
    in_params, out_params = ", ".join(params), ", ".join(f"T out{i}" for i in range(len(outputs)))
    operation = "\n".join(body)
    key = f"// in: {in_params}\n// out: {out_params}\n{operation}"
    if key not in _CACHE:
        name = "fused_" + hashlib.sha1(key.encode()).hexdigest()[:12]
        _CACHE[key] = xp.ElementwiseKernel(in_params, out_params, operation, name)
    kernel = _CACHE[key]
    size = int(np.prod(shape, dtype=np.int64))

    def run(*arrays):
        outs = [xp.empty(shape, dtype=xp.float32) for _ in outputs]
        ins = [
            xp.ascontiguousarray(a).reshape(cols)
            if p == "row"
            else xp.ascontiguousarray(xp.broadcast_to(a, shape)).reshape(size)
            for a, p in zip(arrays, patterns, strict=True)
        ]
        kernel(*ins, *[o.reshape(size) for o in outs])
        return tuple(outs) if len(outs) > 1 else outs[0]

    return FusedKernel(key, tuple(inputs), tuple(outputs), tuple(shape), run)
