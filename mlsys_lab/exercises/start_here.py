"""Checks for the warm-up exercises of 00_start_here."""

from __future__ import annotations

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.units import BYTES_PER_DTYPE


def reference_tensor_bytes(shape: tuple[int, ...], dtype: str) -> float:
    n = 1
    for dim in shape:
        n *= dim
    return n * BYTES_PER_DTYPE[dtype]


def reference_add_intensity(n: int, bytes_per_element: int) -> float:
    # c = a + b: n additions; read a and b, write c.
    return n / (3 * n * bytes_per_element)


def check_tensor_bytes(fn) -> None:
    """``fn(shape, dtype)`` -> bytes a dense tensor occupies."""
    cases = [Case("shape=(4096, 4096), fp16", ((4096, 4096), "fp16"), expected=33554432),
             Case("shape=(7,), fp32", ((7,), "fp32"), expected=28)]
    g = rng()
    dtypes = list(BYTES_PER_DTYPE)
    for _ in range(10):
        shape = tuple(int(d) for d in g.integers(1, 300, size=g.integers(1, 5)))
        dtype = dtypes[int(g.integers(len(dtypes)))]
        cases.append(Case(f"shape={shape}, {dtype}", (shape, dtype), expected=reference_tensor_bytes(shape, dtype)))
    check("tensor_bytes", fn, cases)


def check_add_intensity(fn) -> None:
    """``fn(n, bytes_per_element)`` -> FLOP per byte of c = a + b over n elements."""
    cases = [Case("n=1000, 4 bytes", (1000, 4), expected=1 / 12)]
    g = rng()
    for _ in range(8):
        n, b = int(g.integers(1, 10**7)), int(g.choice([1, 2, 4, 8]))
        cases.append(Case(f"n={n}, {b} bytes", (n, b), expected=reference_add_intensity(n, b)))
    check("add_intensity", fn, cases)
