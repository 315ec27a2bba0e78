"""Launcher for the weight-only int8 matmul in ``training_memory/int8_matmul.cu``, and its NumPy reference.

Weight-only quantization (lesson 06, :mod:`mlsys_lab.training_memory.quantize`) stores W as int8 codes
with one fp32 scale per output channel and keeps the activations in 16-bit float. At decode batch
sizes the matmul is bound by reading W, so 1 byte per weight instead of 2 is up to 2x faster; the
kernel dequantizes in registers, after the bytes have crossed HBM.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_int

SOURCE = "training_memory/int8_matmul.cu"
MAX_BATCH_ROWS = 16  # the largest MAX_M the kernel is compiled for


def int8_weight_matmul_reference(x: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """y = x · (scale ⊙ W)ᵀ in float32: x (M, K), codes (N, K) int8, scales (N,) → (M, N)."""
    k = check_array("x", x, ndim=2, finite=True).shape[1]
    if (rows := check_array("codes", codes, ndim=2, kinds="iu").shape)[1] != k:
        raise ValueError(f"codes must be (N, K) with the K = {k} columns of x; got shape {rows}")
    if (shape := check_array("scales", scales, ndim=1, finite=True).shape) != (rows[0],):
        raise ValueError(f"scales must hold one scale per row of codes ({rows[0]}); got shape {shape}")
    return (np.asarray(x, np.float32) @ np.asarray(codes, np.float32).T) * np.asarray(scales, np.float32)


def int8_weight_matmul(x, codes, scales, k_unroll: int = 4, max_m: int | None = None):
    """Weight-only int8 matmul. On CuPy: the kernel in ``kernels/training_memory/int8_matmul.cu``
    (x fp16 (M, K) with M ≤ 16 and K % 16 == 0, codes int8 (N, K), scales fp32 (N,) → fp16 (M, N)).
    On NumPy: :func:`int8_weight_matmul_reference`.

    ``k_unroll``: 16-byte weight loads each lane issues before using them (bytes in flight);
    ``max_m``: the batch rows the kernel is compiled for (default: the smallest power of two ≥ M;
    a larger value holds more accumulators, so more registers per thread and fewer warps per SM).
    """
    M, K = x.shape
    N = codes.shape[0]
    check_int("rows of x", M, low=1, high=MAX_BATCH_ROWS)
    check_int("k_unroll", k_unroll, low=1, high=8)
    max_m = 1 << (M - 1).bit_length() if max_m is None else check_int("max_m", max_m, low=M, high=MAX_BATCH_ROWS)
    if K % 16 or codes.shape[1] != K:
        raise ValueError(f"K must be a multiple of 16 and match codes' columns; "
                         f"got x {x.shape}, codes {codes.shape}")
    if not backend.on_gpu:
        return int8_weight_matmul_reference(x, codes, scales)
    cp = backend.xp
    kernel = loader.kernel(SOURCE, "int8_weight_matmul", {"MAX_M": max_m, "K_UNROLL": k_unroll})
    x = cp.ascontiguousarray(x, dtype=cp.float16)
    codes = cp.ascontiguousarray(codes, dtype=cp.int8)
    scales = cp.ascontiguousarray(scales, dtype=cp.float32)
    y = cp.empty((M, N), dtype=cp.float16)
    threads, rows_per_block = 256, 8
    kernel(((N + rows_per_block - 1) // rows_per_block,), (threads,),
           (x, codes, scales, y, np.int32(M), np.int32(N), np.int32(K)))
    return y
