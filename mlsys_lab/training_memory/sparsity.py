"""Weight sparsity (权重稀疏化): unstructured magnitude pruning vs 2:4 semi-structured sparsity.

Unstructured: zero the smallest-magnitude weights anywhere; the survivors sit at arbitrary places,
so storing them needs an index per value (CSR: a column index per value plus a row pointer per row)
and a kernel reads them with scattered accesses. 2:4 (NVIDIA Ampere, Mishra et al. 2021): in every
group of 4 consecutive weights of a row keep the 2 largest; storage is the 2 values plus a 2-bit
position each, and sparse tensor cores skip the zeros at full speed. Both sizes are exact below.
Arrays are NumPy: pruning is done once, on the host.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_int, check_number


def prune_unstructured(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Zero the ``sparsity`` fraction of weights with the smallest |w| (ties: lowest index first)."""
    check_number("sparsity", sparsity, low=0.0, high=1.0)
    w = np.asarray(check_array("w", w, finite=True, min_size=0))
    n_zero = int(round(sparsity * w.size))
    flat = w.reshape(-1).copy()
    flat[np.argsort(np.abs(flat), kind="stable")[:n_zero]] = 0
    return flat.reshape(w.shape)


def prune_n_m(w: np.ndarray, n: int = 2, m: int = 4) -> np.ndarray:
    """Keep the ``n`` largest |w| in every group of ``m`` consecutive weights of each row (2:4 by default)."""
    w = np.asarray(w)
    m = check_int("m", m, low=1)
    n = check_int("n", n, low=0, high=m)
    if w.ndim != 2 or w.shape[1] % m:
        raise ValueError(f"w must be 2-D with a column count divisible by m={m}; got shape {w.shape}")
    groups = w.reshape(w.shape[0], -1, m)
    order = np.argsort(np.abs(groups), axis=2, kind="stable")  # ascending: drop the first m − n
    keep = np.ones_like(groups, dtype=bool)
    np.put_along_axis(keep, order[..., : m - n], False, axis=2)
    return (groups * keep).reshape(w.shape)


def csr_bytes(w: np.ndarray, value_bytes: int = 2, index_bytes: int = 4) -> int:
    """Compressed sparse row: nnz values + nnz column indices + (rows + 1) row pointers."""
    check_int("value_bytes", value_bytes, low=1)
    check_int("index_bytes", index_bytes, low=1)
    w = np.asarray(check_array("w", w, min_size=0))
    if w.ndim != 2:
        raise ValueError(f"w must be a 2-D array; got shape {w.shape}")
    nnz = int(np.count_nonzero(w))
    return nnz * (value_bytes + index_bytes) + (w.shape[0] + 1) * index_bytes


def two_four_bytes(shape: tuple[int, int], value_bytes: int = 2) -> float:
    """2:4 storage: half the values, plus 2 bits of position metadata per kept value."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be a (rows, cols) pair; got {shape!r:.40}")
    rows, cols = (check_int(label, size, low=1) for label, size in zip(("shape[0]", "shape[1]"), shape, strict=True))
    check_int("value_bytes", value_bytes, low=1)
    if cols % 4:
        raise ValueError(f"the column count must be divisible by 4 for 2:4 sparsity; got {cols}")
    kept = rows * cols // 2
    return kept * value_bytes + kept * 2 / 8


def dense_bytes(shape: tuple[int, int], value_bytes: int = 2) -> int:
    """Bytes of a dense (rows, cols) matrix: rows · cols · value_bytes."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise ValueError(f"shape must be a (rows, cols) pair; got {shape!r}")
    rows, cols = (check_int("shape", n, low=0) for n in shape)
    return rows * cols * check_int("value_bytes", value_bytes, low=1)
