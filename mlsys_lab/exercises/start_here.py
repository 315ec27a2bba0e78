"""Checks for the warm-up exercises of 00_start_here."""

from __future__ import annotations

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.operators.cost import elementwise_cost
from mlsys_lab.start_here.transfers import tensor_bytes
from mlsys_lab.units import BYTES_PER_DTYPE


def check_tensor_bytes(fn) -> None:
    """``fn(shape, dtype)`` -> bytes a dense tensor occupies."""
    cases = [Case("shape=(4096, 4096), fp16", ((4096, 4096), "fp16"), expected=33554432),
             Case("shape=(7,), fp32", ((7,), "fp32"), expected=28)]
    g = rng()
    dtypes = [d for d in BYTES_PER_DTYPE if d != "tf32"]  # the formats the exercise lists (tf32 is stored as fp32)
    for _ in range(10):
        shape = tuple(int(d) for d in g.integers(1, 300, size=g.integers(1, 5)))
        dtype = dtypes[int(g.integers(len(dtypes)))]
        cases.append(Case(f"shape={shape}, {dtype}", (shape, dtype), expected=tensor_bytes(shape, dtype)))
    check("tensor_bytes", fn, cases)


def check_add_intensity(fn) -> None:
    """``fn(n, bytes_per_element)`` -> FLOP per byte of c = a + b over n elements (n additions; a and b read,
    c written: 3 n b bytes)."""
    cases = [Case("n=1000, 4 bytes", (1000, 4), expected=1 / 12)]
    g = rng()
    for _ in range(8):
        n, dtype = int(g.integers(1, 10**7)), str(g.choice(["fp8", "bf16", "fp32", "fp64"]))
        b = int(BYTES_PER_DTYPE[dtype])
        expected = elementwise_cost(n, n_inputs=2, dtype=dtype).intensity
        cases.append(Case(f"n={n}, {b} bytes", (n, b), expected=expected))
    check("add_intensity", fn, cases)
