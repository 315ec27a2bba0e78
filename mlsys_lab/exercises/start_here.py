"""Checks for the warm-up exercises of 00_start_here."""

from __future__ import annotations

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.operators.cost import elementwise_cost
from mlsys_lab.start_here.transfers import tensor_bytes
from mlsys_lab.units import BYTES_PER_DTYPE

# The formats the exercise lists (tf32 is stored as fp32, so the table leaves it out).
DTYPES = [d for d in BYTES_PER_DTYPE if d != "tf32"]


def check_tensor_bytes(fn) -> None:
    """``fn(shape, dtype)`` -> bytes a dense tensor occupies.

    Fixed cases: the two examples, every dtype once (fp16 vs bf16, fp8 and int4 below a word), a scalar
    ``()``, a rank-4 shape, and a 70-billion-element vector whose count overflows 32-bit integers.
    """
    cases = [Case("shape=(4096, 4096), fp16", ((4096, 4096), "fp16"), expected=33554432),
             Case("shape=(7,), fp32", ((7,), "fp32"), expected=28)]
    for i, dtype in enumerate(DTYPES):
        shape = (3, 5 + i, 2)  # an even element count: int4 packs two values per byte
        cases.append(Case(f"shape={shape}, {dtype}", (shape, dtype), expected=tensor_bytes(shape, dtype)))
    cases += [
        Case("shape=() (a scalar), fp64", ((), "fp64"), expected=8),
        Case("shape=(2, 3, 4, 5), bf16", ((2, 3, 4, 5), "bf16"), expected=240),
        Case("shape=(70_000_000_000,), bf16", ((70_000_000_000,), "bf16"), expected=1.4e11),
    ]
    g = rng()
    for _ in range(10):
        shape = [int(d) for d in g.integers(1, 300, size=g.integers(1, 5))]
        dtype = DTYPES[int(g.integers(len(DTYPES)))]
        if dtype == "int4" and shape[0] % 2:
            shape[0] += 1  # two int4 values per byte: keep whole bytes
        shape = tuple(shape)
        cases.append(Case(f"shape={shape}, {dtype}", (shape, dtype), expected=tensor_bytes(shape, dtype)))
    check("tensor_bytes", fn, cases)


def check_add_intensity(fn) -> None:
    """``fn(n, bytes_per_element)`` -> FLOP per byte of c = a + b over n elements (n additions; a and b read,
    c written: 3 n b bytes). Fixed cases: the example, n = 1, and 1, 2 and 8 bytes per element."""
    cases = [Case("n=1000, 4 bytes", (1000, 4), expected=1 / 12)]
    cases += [Case(f"n={n}, {b} bytes", (n, b), expected=1 / (3 * b)) for n, b in ((1, 4), (999, 1), (4096, 2),
                                                                                     (10**8, 8))]
    g = rng()
    for _ in range(8):
        n, dtype = int(g.integers(1, 10**7)), str(g.choice(["fp8", "bf16", "fp32", "fp64"]))
        b = int(BYTES_PER_DTYPE[dtype])
        expected = elementwise_cost(n, n_inputs=2, dtype=dtype).intensity
        cases.append(Case(f"n={n}, {b} bytes", (n, b), expected=expected))
    check("add_intensity", fn, cases)
