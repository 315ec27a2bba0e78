"""Operator costs: FLOPs, minimum bytes moved and arithmetic intensity of the common ML operators.

An operator (算子) works on whole tensors. Its cost on a processor is bounded by two numbers:

* ``flop``: floating-point operations it must do (a multiply-add counts as 2);
* ``n_bytes``: the fewest bytes it must move between main memory (DRAM/HBM) and the chip, i.e. each
  input read once and each output written once, assuming perfect on-chip reuse.

Their ratio, the arithmetic intensity ``I = flop / n_bytes`` (FLOP/byte), places the operator on the
roofline (Williams, Waterman & Patterson, CACM 2009): below the ridge point ``peak / bandwidth`` it is
memory-bound, above it compute-bound (:func:`bound`), and it cannot run faster than
max(flop / peak, n_bytes / bandwidth) (:func:`time_lower_bound_seconds`). Lesson 03 draws the roofline
itself (:mod:`mlsys_lab.roofline`). The four classes of the notes:

* ``elementwise`` (ReLU, Add, GELU): O(1) FLOP per element, I < 1 -> memory-bound; optimise by fusion;
* ``tensor`` (MatMul, Conv, Attention): I grows with the sizes -> compute-bound when large; tiling;
* ``reduction`` (Softmax, LayerNorm, Sum): a few FLOP per element, I ~ 1 -> memory-bound in practice;
* ``transform`` (Transpose, Reshape, Concat): no FLOPs, only bytes (or none: a reshape is a view).

FLOP conventions (stated so the numbers can be checked by hand): one add/mul/compare/max = 1 FLOP,
one transcendental (exp, tanh) = 1 FLOP (one special-function instruction on a GPU), a multiply-add = 2 FLOP.
Every cost takes the element type as a dtype name (``"fp32"``, ``"bf16"``; see :mod:`mlsys_lab.units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.hardware import Hardware
from mlsys_lab.units import bytes_per_element
from mlsys_lab.validation import check_bool, check_choice, check_finite, check_int, check_type

OP_CLASSES = ("elementwise", "tensor", "reduction", "transform")

# FLOP per output element of the elementwise operators the course uses (conventions above).
FLOP_PER_ELEMENT = {
    "relu": 1,  # max(x, 0)
    "add": 1,
    "sub": 1,
    "mul": 1,
    "div": 1,
    "maximum": 1,
    "neg": 1,
    "square": 1,
    "exp": 1,
    "log": 1,
    "tanh": 1,
    "sqrt": 1,
    "sigmoid": 4,  # 1 / (1 + exp(-x)): neg, exp, add, div
    "gelu": 9,  # 0.5·x·(1 + tanh(0.79788·(x + 0.044715·x³))): x³ 2, 4 more mul, 2 add, tanh
}


@dataclass(frozen=True)
class OpCost:
    """The roofline coordinates of one operator call.

    ``flop``: floating-point operations; ``n_bytes``: minimum bytes moved to and from main memory;
    ``intensity``: flop / n_bytes in FLOP/byte (0 when nothing moves).
    """

    name: str
    op_class: str
    flop: float
    n_bytes: float
    shape_text: str = ""

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_choice("op_class", self.op_class, OP_CLASSES)
        check_finite("flop", self.flop, low=0)
        check_finite("n_bytes", self.n_bytes, low=0)
        check_type("shape_text", self.shape_text, str)

    @property
    def intensity(self) -> float:
        return self.flop / self.n_bytes if self.n_bytes else 0.0


def _dim(name: str, value) -> int:
    return check_int(name, value, low=1)


def _element_bytes(dtype: str) -> float:
    return float(bytes_per_element(dtype))


def elementwise_cost(
    n_elements: int, n_inputs: int = 1, flop_per_element: float = 1, dtype: str = "fp32", name: str = "elementwise"
) -> OpCost:
    """y = f(x1, ..., xk) over ``n_elements``: flop = n·f, n_bytes = (k + 1)·n·b (k inputs read, 1 written)."""
    n = _dim("n_elements", n_elements)
    k = check_int("n_inputs", n_inputs, low=0, high=16)
    f = check_finite("flop_per_element", flop_per_element, low=0)
    check_type("name", name, str)
    b = _element_bytes(dtype)
    return OpCost(name, "elementwise", n * f, (k + 1) * n * b, f"{n:,} elements, {k} input(s)")


def matmul_cost(m: int, n: int, k: int, dtype: str = "fp32") -> OpCost:
    """C[m,n] = A[m,k] · B[k,n]: flop = 2mnk, n_bytes = (mk + kn + mn)·b (each matrix crosses memory once)."""
    m, n, k = _dim("m", m), _dim("n", n), _dim("k", k)
    b = _element_bytes(dtype)
    return OpCost("matmul", "tensor", 2.0 * m * n * k, (m * k + k * n + m * n) * b, f"({m}×{k})·({k}×{n})")


def matmul_tile_traffic(m: int, n: int, k: int, tile_m: int, tile_n: int, dtype: str = "fp32") -> float:
    """Bytes a tiled matmul moves when each block loads a tile_m x k strip of A and a k x tile_n strip of B.

    A is read n / tile_n times and B m / tile_m times (no reuse across blocks), C written once:
    n_bytes = b (m k n / tile_n + k n m / tile_m + m n). Larger tiles raise the intensity; the minimum
    (each matrix once) is :func:`matmul_cost`'s.
    """
    b = _element_bytes(dtype)
    for name, value in (("m", m), ("n", n), ("k", k), ("tile_m", tile_m), ("tile_n", tile_n)):
        _dim(name, value)
    return float(b * (m * k * (n / tile_n) + k * n * (m / tile_m) + m * n))


def batched_matmul_cost(batch: int, m: int, n: int, k: int, dtype: str = "fp32") -> OpCost:
    """``batch`` independent matmuls: flop = 2·batch·mnk, n_bytes = batch·(mk + kn + mn)·b."""
    batch = _dim("batch", batch)
    one = matmul_cost(m, n, k, dtype)
    return OpCost("batched matmul", "tensor", batch * one.flop, batch * one.n_bytes, f"{batch}×{one.shape_text}")


def conv2d_output_size(size: int, kernel_size: int, stride: int = 1, padding: int = 0) -> int:
    """Output height/width of a convolution: floor((size + 2·padding - kernel) / stride) + 1."""
    size, kernel_size = _dim("size", size), _dim("kernel_size", kernel_size)
    stride, padding = _dim("stride", stride), check_int("padding", padding, low=0)
    out = (size + 2 * padding - kernel_size) // stride + 1
    if out < 1:
        raise ValueError(f"kernel_size must be <= size + 2·padding = {size + 2 * padding}; got {kernel_size}")
    return out


def conv2d_cost(
    batch: int,
    in_channels: int,
    out_channels: int,
    height: int,
    width: int,
    kernel_size: int = 3,
    stride: int = 1,
    padding: int = 1,
    dtype: str = "fp32",
) -> OpCost:
    """Direct 2-D convolution, NCHW: flop = 2·N·Cout·Ho·Wo·Cin·K², n_bytes = (input + weights + output)·b."""
    n, c_in, c_out = _dim("batch", batch), _dim("in_channels", in_channels), _dim("out_channels", out_channels)
    height, width = _dim("height", height), _dim("width", width)
    h_out = conv2d_output_size(height, kernel_size, stride, padding)
    w_out = conv2d_output_size(width, kernel_size, stride, padding)
    b = _element_bytes(dtype)
    flop = 2.0 * n * c_out * h_out * w_out * c_in * kernel_size**2
    moved = (n * c_in * height * width + c_out * c_in * kernel_size**2 + n * c_out * h_out * w_out) * b
    shape = f"{n}×{c_in}×{height}×{width} ⊛ {c_out}×{c_in}×{kernel_size}×{kernel_size}"
    return OpCost("conv2d", "tensor", flop, moved, shape)


def softmax_cost(rows: int, cols: int, dtype: str = "fp32") -> OpCost:
    """Row softmax, fused: 5 FLOP per element (max, subtract, exp, sum, divide);
    x read once and y written once: n_bytes = 2·rows·cols·b."""
    rows, cols = _dim("rows", rows), _dim("cols", cols)
    b = _element_bytes(dtype)
    return OpCost("softmax", "reduction", 5.0 * rows * cols, 2 * rows * cols * b, f"{rows} rows × {cols}")


def layernorm_cost(rows: int, cols: int, dtype: str = "fp32") -> OpCost:
    """LayerNorm with affine weight and bias: 7 FLOP per element (mean, centre, square, sum, scale, mul, add);
    n_bytes = x read + y written + weight and bias read = (2·rows·cols + 2·cols)·b."""
    rows, cols = _dim("rows", rows), _dim("cols", cols)
    b = _element_bytes(dtype)
    moved = (2 * rows * cols + 2 * cols) * b
    return OpCost("layernorm", "reduction", 7.0 * rows * cols, moved, f"{rows} rows × {cols}")


def reduction_cost(n_elements: int, n_outputs: int = 1, dtype: str = "fp32") -> OpCost:
    """Sum of ``n_elements`` into ``n_outputs`` groups: flop = n - n_out additions, n_bytes = (n + n_out)·b."""
    n, n_out = _dim("n_elements", n_elements), _dim("n_outputs", n_outputs)
    if n % n_out:
        raise ValueError(f"n_outputs must divide n_elements={n}; got {n_out}")
    b = _element_bytes(dtype)
    return OpCost("sum", "reduction", float(n - n_out), (n + n_out) * b, f"{n:,} -> {n_out:,}")


def transpose_cost(n_elements: int, dtype: str = "fp32") -> OpCost:
    """A materialised transpose: 0 FLOP, every element read once and written once: 2·n·b bytes."""
    n = _dim("n_elements", n_elements)
    return OpCost("transpose", "transform", 0.0, 2 * n * _element_bytes(dtype), f"{n:,} elements")


def reshape_cost(n_elements: int, contiguous: bool = True, dtype: str = "fp32") -> OpCost:
    """Reshape of a contiguous tensor is a view (0 bytes); of a strided one it is a copy (2·n·b)."""
    n = _dim("n_elements", n_elements)
    b = _element_bytes(dtype)  # checked for a view too
    moved = 0.0 if check_bool("contiguous", contiguous) else 2 * n * b
    return OpCost("reshape", "transform", 0.0, moved, f"{n:,} elements, {'view' if contiguous else 'copy'}")


def concat_cost(sizes: list[int] | tuple[int, ...], dtype: str = "fp32") -> OpCost:
    """Concatenate tensors of ``sizes`` elements: 0 FLOP, each read once and written once: 2·Σn·b."""
    check_type("sizes", sizes, (list, tuple))
    if not sizes:
        raise ValueError("sizes must list at least one tensor size; got an empty list")
    total = sum(_dim("sizes[i]", s) for s in sizes)
    return OpCost("concat", "transform", 0.0, 2 * total * _element_bytes(dtype), f"{len(sizes)} tensors")


def attention_cost(
    batch: int, heads: int, seq_len: int, head_dim: int, dtype: str = "fp32", fused: bool = True
) -> OpCost:
    """softmax(Q·Kᵀ·scale + mask)·V for Q, K, V of shape [batch, heads, seq_len, head_dim].

    flop = 4·B·H·S²·D (the two matmuls) + 7·B·H·S² (scale, mask, 5 for softmax).
    Fused (FlashAttention, Dao et al. 2022): n_bytes = (Q + K + V + O) = 4·B·H·S·D·b; the S×S scores stay on
    chip (FlashAttention re-reads K and V once per query block, which this minimum ignores).
    Unfused: the S×S matrix goes to memory and back after every step: written by Q·Kᵀ, read+written by scale,
    mask and softmax, read by ·V: 8·B·H·S²·b more.
    """
    bh = _dim("batch", batch) * _dim("heads", heads)
    check_bool("fused", fused)
    s, d = _dim("seq_len", seq_len), _dim("head_dim", head_dim)
    b = _element_bytes(dtype)
    flop = 4.0 * bh * s * s * d + 7.0 * bh * s * s
    moved = 4 * bh * s * d * b + (0 if fused else 8 * bh * s * s * b)
    name = "attention (fused)" if fused else "attention (unfused)"
    return OpCost(name, "tensor", flop, moved, f"B·H={bh}, S={s}, D={d}")


def bound(cost: OpCost, hardware: Hardware, dtype: str = "fp32") -> str:
    """``"memory-bound"`` when the intensity is below the ridge point peak/bandwidth, else ``"compute-bound"``
    (``"no work"`` for a view, which neither computes nor moves anything)."""
    check_type("cost", cost, OpCost)
    check_type("hardware", hardware, Hardware)
    if cost.flop == 0 and cost.n_bytes == 0:
        return "no work"
    return "memory-bound" if cost.intensity < hardware.ridge_point(dtype) else "compute-bound"


def time_lower_bound_seconds(cost: OpCost, hardware: Hardware, dtype: str = "fp32") -> float:
    """Roofline lower bound on the run time: max(flop / peak, n_bytes / bandwidth)."""
    check_type("cost", cost, OpCost)
    check_type("hardware", hardware, Hardware)
    return max(cost.flop / hardware.peak(dtype), cost.n_bytes / hardware.memory_bandwidth_bytes_per_s)
