"""The operator catalogue: one canonical shape per operator, driven by one size N (what lesson 01 tabulates
and its explorer sweeps), each priced by :mod:`mlsys_lab.operators.cost`."""

from __future__ import annotations

from mlsys_lab.operators.cost import (
    FLOP_PER_ELEMENT,
    OpCost,
    attention_cost,
    batched_matmul_cost,
    concat_cost,
    conv2d_cost,
    elementwise_cost,
    layernorm_cost,
    matmul_cost,
    reduction_cost,
    reshape_cost,
    softmax_cost,
    transpose_cost,
)
from mlsys_lab.validation import check_choice, check_int

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
    if op_name in ("relu", "gelu"):
        return elementwise_cost(n * n, 1, FLOP_PER_ELEMENT[op_name], dtype, op_name)
    if op_name == "add":
        return elementwise_cost(n * n, 2, 1, dtype, "add")
    if op_name == "matmul":
        return matmul_cost(n, n, n, dtype)
    if op_name == "batched matmul":
        return batched_matmul_cost(16, n, n, 64, dtype)
    if op_name == "conv2d":
        return conv2d_cost(8, n, n, 56, 56, 3, 1, 1, dtype)
    if op_name == "softmax":
        return softmax_cost(n, n, dtype)
    if op_name == "layernorm":
        return layernorm_cost(n, n, dtype)
    if op_name == "sum":
        return reduction_cost(n * n, n, dtype)
    if op_name == "transpose":
        return transpose_cost(n * n, dtype)
    if op_name == "reshape":
        return reshape_cost(n * n, True, dtype)
    if op_name == "concat":
        return concat_cost([n * n, n * n], dtype)
    return attention_cost(1, 16, n, 64, dtype, fused=op_name == "attention (fused)")
