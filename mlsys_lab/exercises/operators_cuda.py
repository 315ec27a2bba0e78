"""The CUDA exercise of 01_operators: a fused bias + GELU + scale kernel, checked and timed on the GPU.

``bias_gelu(x, bias, scale)`` is the learner's launcher: x (rows, width) and bias (width,) float32 device
arrays, scale a float; it returns scale · gelu(x + bias) (GELU in its tanh form) as a new (rows, width) float32
device array, computed by the learner's kernel with a grid-stride loop. The cases are shaped to catch what goes
wrong: no element, one element, a width of 1, sizes that are no multiple of a block, and a case larger than any
grid a launcher sizes to the GPU rather than to n.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, rng
from mlsys_lab.exercises.cuda_kernels import (
    KernelRace,
    TimedCase,
    arrays_close,
    check_kernel,
    float32_result,
    launcher,
    speed_point,
)
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.operators.bias_gelu import bias_gelu as course_bias_gelu
from mlsys_lab.kernels.operators.bias_gelu import bias_gelu_bytes, bias_gelu_reference

RTOL, ATOL = 1e-5, 3e-5  # float32 tanhf against float64: 1 + tanh(z) loses digits where gelu(v) ~ 0
# The floor, a fraction of the course's kernel's speed. On the H200 an uncoalesced kernel runs at 8% of it, one
# thread per element (a grid of n / 256 blocks, no loop) at 53%: short blocks, and tanhf and the 64-bit i % width
# make the kernel nearly compute-bound there, which a T4's lower bandwidth would not.
FLOOR = 0.5
TIMED_SHAPE = (8192, 4096)  # 2^25 elements, 256 MiB moved: far larger than any L2
EXAMPLE = (np.array([[-1.0, 0.0, 1.0], [2.0, -2.0, 0.5]], dtype=np.float32),
           np.array([0.5, 0.0, -0.5], dtype=np.float32), 2.0)
SLOW_HINT = ("a correct kernel this slow is usually uncoalesced (neighbouring threads on addresses far apart: "
             "index x[i] with i = blockIdx.x * blockDim.x + threadIdx.x) or launches too few blocks to fill the GPU")


def _inputs(g, rows: int, width: int) -> tuple[np.ndarray, np.ndarray, float]:
    x = (2 * g.standard_normal((rows, width))).astype(np.float32)
    bias = g.standard_normal(width).astype(np.float32)
    scale = float(np.float32(g.uniform(0.5, 2.0)))  # exactly a float32, as the kernel receives it
    return x, bias, scale


def _case(label: str, x: np.ndarray, bias: np.ndarray, scale: float) -> Case:
    return Case(f"{label}: x {x.shape[0]} x {x.shape[1]}, scale {scale:.4g}", (x, bias, scale),
                expected=bias_gelu_reference(x, bias, scale), check_result=float32_result)


def bias_gelu_cases(g) -> list[Case]:
    """The example, the boundaries (empty, one element, width 1, odd sizes) and random shapes up to 4.2 M."""
    shapes = [("one element", 1, 1), ("empty", 0, 7), ("a width of 1", 5, 1), ("one odd row", 1, 257),
              ("odd sizes", 3, 333), ("no multiple of a block", 257, 129)]
    shapes += [("random", int(g.integers(1, 400)), int(g.integers(1, 3000))) for _ in range(2)]
    shapes.append(("larger than a grid sized to the GPU", 1023, 4099))
    return [_case("the example", *EXAMPLE)] + [_case(label, *_inputs(g, r, w)) for label, r, w in shapes]


def bias_gelu_timed(g) -> TimedCase:
    x, bias, scale = _inputs(g, *TIMED_SHAPE)
    return TimedCase(f"x {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]}", (x, bias, scale), course_bias_gelu,
                     bias_gelu_bytes(*TIMED_SHAPE), FLOOR, SLOW_HINT)


@speed_point
def check_bias_gelu(fn) -> None:
    """``fn(x, bias, scale)`` -> scale · gelu(x + bias) (tanh form), float32, on the GPU: 10 cases within
    rtol 1e-5, atol 3e-5 of the float64 reference; then timed against the course's kernel (floor 50%)."""
    g = rng()
    check_kernel("bias_gelu", fn, lambda: bias_gelu_cases(g), arrays_close(RTOL, ATOL),
                        lambda: bias_gelu_timed(g))


def race_bias_gelu(fn) -> KernelRace:
    """The learner's ``bias_gelu`` timed beside the course's kernel and a copy on this GPU (the "see it" cell)."""
    loader.require_gpu("race_bias_gelu")
    timed = bias_gelu_timed(rng())
    return timed.race(launcher(fn))[0]
