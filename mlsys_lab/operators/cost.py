"""Operator costs: FLOPs, minimum bytes moved and arithmetic intensity of the common ML operators.

An operator (算子) works on whole tensors. Its cost on a processor is bounded by two numbers:

* ``flops``: floating-point operations it must do (a multiply-add counts as 2);
* ``bytes``: the fewest bytes it must move between main memory (DRAM/HBM) and the chip, i.e. each
  input read once and each output written once, assuming perfect on-chip reuse.

Their ratio, the arithmetic intensity ``I = flops / bytes`` (FLOP/byte), places the operator on the
roofline (Williams, Waterman & Patterson, CACM 2009): below the ridge point ``peak / bandwidth`` it is
memory-bound, above it compute-bound. The four classes of the notes:

* ``elementwise`` (ReLU, Add, GELU): O(1) FLOP per element, I < 1 -> memory-bound; optimise by fusion;
* ``tensor`` (MatMul, Conv, Attention): I grows with the sizes -> compute-bound when large; tiling;
* ``reduction`` (Softmax, LayerNorm, Sum): a few FLOP per element, I ~ 1 -> memory-bound in practice;
* ``transform`` (Transpose, Reshape, Concat): no FLOPs, only bytes (or none: a reshape is a view).

FLOP conventions (stated so the numbers can be checked by hand): one add/mul/compare/max = 1 FLOP,
one transcendental (exp, tanh) = 1 FLOP, a multiply-add = 2 FLOP.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.hardware import Hardware
from mlsys_lab.units import bytes_per_element
from mlsys_lab.validation import check_choice, check_int, check_number

OP_CLASSES = ("elementwise", "tensor", "reduction", "transform")


# FLOP per output element of the elementwise operators the course uses (conventions above).
ELEMENTWISE_FLOPS = {
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

    ``flops``: floating-point operations; ``bytes``: minimum bytes moved to and from main memory;
    ``intensity``: flops / bytes in FLOP/byte (0 when nothing moves).
    """

    name: str
    op_class: str
    flops: float
    bytes: float  # noqa: A003  (the documented API name; n_bytes is an alias)
    shape_text: str = ""

    @property
    def n_bytes(self) -> float:
        return self.bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def _bpe(bytes_per_element) -> float:
    return check_number("bytes_per_element", bytes_per_element, low=0.125, high=16)


def _dim(name: str, value) -> int:
    return check_int(name, value, low=1)


def elementwise_cost(
    n_elements: int,
    n_inputs: int = 1,
    flops_per_element: float = 1,
    bytes_per_element: float = 4,
    name: str = "elementwise",
) -> OpCost:
    """y = f(x1, ..., xk) over ``n_elements``: flops = n·f, bytes = (k + 1)·n·b (k inputs read, 1 written)."""
    n = _dim("n_elements", n_elements)
    k = check_int("n_inputs", n_inputs, low=0, high=16)
    f = check_number("flops_per_element", flops_per_element, low=0)
    b = _bpe(bytes_per_element)
    return OpCost(name, "elementwise", n * f, (k + 1) * n * b, f"{n:,} elements, {k} input(s)")


def matmul_cost(m: int, n: int, k: int, bytes_per_element: float = 4) -> OpCost:
    """C[m,n] = A[m,k] · B[k,n]: flops = 2mnk, bytes = (mk + kn + mn)·b."""
    m, n, k = _dim("m", m), _dim("n", n), _dim("k", k)
    b = _bpe(bytes_per_element)
    return OpCost("matmul", "tensor", 2.0 * m * n * k, (m * k + k * n + m * n) * b, f"({m}×{k})·({k}×{n})")


def batched_matmul_cost(batch: int, m: int, n: int, k: int, bytes_per_element: float = 4) -> OpCost:
    """``batch`` independent matmuls: flops = 2·batch·mnk, bytes = batch·(mk + kn + mn)·b."""
    batch = _dim("batch", batch)
    one = matmul_cost(m, n, k, bytes_per_element)
    return OpCost(
        "batched matmul", "tensor", batch * one.flops, batch * one.bytes, f"{batch}×{one.shape_text}"
    )


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
    bytes_per_element: float = 4,
) -> OpCost:
    """Direct 2-D convolution, NCHW: flops = 2·N·Cout·Ho·Wo·Cin·K², bytes = (input + weights + output)·b."""
    n, c_in, c_out = (
        _dim("batch", batch),
        _dim("in_channels", in_channels),
        _dim("out_channels", out_channels),
    )
    h_out = conv2d_output_size(height, kernel_size, stride, padding)
    w_out = conv2d_output_size(width, kernel_size, stride, padding)
    b = _bpe(bytes_per_element)
    flops = 2.0 * n * c_out * h_out * w_out * c_in * kernel_size**2
    moved = (n * c_in * height * width + c_out * c_in * kernel_size**2 + n * c_out * h_out * w_out) * b
    return OpCost(
        "conv2d",
        "tensor",
        flops,
        moved,
        f"{n}×{c_in}×{height}×{width} ⊛ {c_out}×{c_in}×{kernel_size}×{kernel_size}",
    )


def softmax_cost(rows: int, cols: int, bytes_per_element: float = 4) -> OpCost:
    """Row softmax: 5 FLOP per element (max, subtract, exp, sum, divide);
    bytes = read + write = 2·rows·cols·b."""
    rows, cols = _dim("rows", rows), _dim("cols", cols)
    b = _bpe(bytes_per_element)
    return OpCost("softmax", "reduction", 5.0 * rows * cols, 2 * rows * cols * b, f"{rows} rows × {cols}")


def layernorm_cost(rows: int, cols: int, bytes_per_element: float = 4) -> OpCost:
    """LayerNorm with affine weight and bias: 7 FLOP per element (mean, centre, square, sum, scale, mul, add);
    bytes = x read + y written + weight and bias read = (2·rows·cols + 2·cols)·b."""
    rows, cols = _dim("rows", rows), _dim("cols", cols)
    b = _bpe(bytes_per_element)
    return OpCost(
        "layernorm", "reduction", 7.0 * rows * cols, (2 * rows * cols + 2 * cols) * b, f"{rows} rows × {cols}"
    )


def reduction_cost(n_elements: int, n_outputs: int = 1, bytes_per_element: float = 4) -> OpCost:
    """Sum of ``n_elements`` into ``n_outputs`` groups: flops = n - n_out additions, bytes = (n + n_out)·b."""
    n, n_out = _dim("n_elements", n_elements), _dim("n_outputs", n_outputs)
    if n % n_out:
        raise ValueError(f"n_outputs must divide n_elements={n}; got {n_out}")
    b = _bpe(bytes_per_element)
    return OpCost("sum", "reduction", float(n - n_out), (n + n_out) * b, f"{n:,} -> {n_out:,}")


def transpose_cost(n_elements: int, bytes_per_element: float = 4) -> OpCost:
    """A materialised transpose: 0 FLOP, every element read once and written once: 2·n·b bytes."""
    n = _dim("n_elements", n_elements)
    return OpCost("transpose", "transform", 0.0, 2 * n * _bpe(bytes_per_element), f"{n:,} elements")


def reshape_cost(n_elements: int, contiguous: bool = True, bytes_per_element: float = 4) -> OpCost:
    """Reshape of a contiguous tensor is a view (0 bytes); of a strided one it is a copy (2·n·b)."""
    n = _dim("n_elements", n_elements)
    moved = 0.0 if contiguous else 2 * n * _bpe(bytes_per_element)
    return OpCost("reshape", "transform", 0.0, moved, f"{n:,} elements, {'view' if contiguous else 'copy'}")


def concat_cost(sizes: list[int] | tuple[int, ...], bytes_per_element: float = 4) -> OpCost:
    """Concatenate tensors of ``sizes`` elements: 0 FLOP, each read once and written once: 2·Σn·b."""
    if not sizes:
        raise ValueError("sizes must list at least one tensor size; got an empty list")
    total = sum(_dim("sizes[i]", s) for s in sizes)
    return OpCost("concat", "transform", 0.0, 2 * total * _bpe(bytes_per_element), f"{len(sizes)} tensors")


def attention_cost(
    batch: int, heads: int, seq_len: int, head_dim: int, bytes_per_element: float = 4, fused: bool = True
) -> OpCost:
    """softmax(Q·Kᵀ·scale + mask)·V for Q, K, V of shape [batch, heads, seq_len, head_dim].

    flops = 4·B·H·S²·D (the two matmuls) + 7·B·H·S² (scale, mask, 5 for softmax).
    Fused (FlashAttention, Dao et al. 2022): bytes = (Q + K + V + O) = 4·B·H·S·D·b; the S×S scores stay on
    chip
    (FlashAttention re-reads K and V once per query block, which this minimum ignores).
    Unfused: the S×S matrix goes to memory and back after every step: written by Q·Kᵀ, read+written by scale,
    mask and softmax, read by ·V: 8·B·H·S²·b more.
    """
    bh = _dim("batch", batch) * _dim("heads", heads)
    s, d = _dim("seq_len", seq_len), _dim("head_dim", head_dim)
    b = _bpe(bytes_per_element)
    flops = 4.0 * bh * s * s * d + 7.0 * bh * s * s
    moved = 4 * bh * s * d * b + (0 if fused else 8 * bh * s * s * b)
    return OpCost(
        "attention (fused)" if fused else "attention (unfused)",
        "tensor",
        flops,
        moved,
        f"B·H={bh}, S={s}, D={d}",
    )


def bound(cost: OpCost, hardware: Hardware, dtype: str = "fp32") -> str:
    """``"memory-bound"`` when the intensity is below the ridge point peak/bandwidth, else ``"compute-bound"``
    (``"no work"`` for a view, which neither computes nor moves anything)."""
    if cost.flops == 0 and cost.bytes == 0:
        return "no work"
    return "memory-bound" if cost.intensity < hardware.ridge_point(dtype) else "compute-bound"


def time_lower_bound_seconds(cost: OpCost, hardware: Hardware, dtype: str = "fp32") -> float:
    """Roofline lower bound on the run time: max(flops / peak, bytes / bandwidth)."""
    return max(cost.flops / hardware.peak(dtype), cost.bytes / hardware.memory_bandwidth_bytes_per_s)


# One canonical shape per operator, driven by one size N: what the explorer sweeps.
CATALOGUE = (
    "relu",
    "add",
    "gelu",
    "matmul",
    "batched matmul",
    "conv2d",
    "softmax",
    "layernorm",
    "sum",
    "transpose",
    "reshape",
    "concat",
    "attention (unfused)",
    "attention (fused)",
)


def catalogue_cost(op_name: str, size: int, dtype: str = "fp32") -> OpCost:
    """The cost of ``op_name`` at its canonical shape for size N (see the shape_text of the result).

    elementwise, softmax, layernorm, sum, transpose: an N×N tensor; matmul: N×N×N; batched matmul: 16
    heads of (N×64)·(64×N) (attention scores); conv2d: batch 8, 56×56 image, N→N channels, 3×3;
    concat: two N×N tensors; attention: 1×16 heads, S = N, D = 64.
    """
    check_choice("op_name", op_name, CATALOGUE)
    n = check_int("size", size, low=1, high=1 << 20)
    b = bytes_per_element(dtype)
    if op_name in ("relu", "gelu"):
        return elementwise_cost(n * n, 1, ELEMENTWISE_FLOPS[op_name], b, op_name)
    if op_name == "add":
        return elementwise_cost(n * n, 2, 1, b, "add")
    if op_name == "matmul":
        return matmul_cost(n, n, n, b)
    if op_name == "batched matmul":
        return batched_matmul_cost(16, n, n, 64, b)
    if op_name == "conv2d":
        return conv2d_cost(8, n, n, 56, 56, 3, 1, 1, b)
    if op_name == "softmax":
        return softmax_cost(n, n, b)
    if op_name == "layernorm":
        return layernorm_cost(n, n, b)
    if op_name == "sum":
        return reduction_cost(n * n, n, b)
    if op_name == "transpose":
        return transpose_cost(n * n, b)
    if op_name == "reshape":
        return reshape_cost(n * n, True, b)
    if op_name == "concat":
        return concat_cost([n * n, n * n], b)
    return attention_cost(1, 16, n, 64, b, fused=op_name == "attention (fused)")
