"""Do the lesson 04 checks catch wrong answers, and do their references agree with simt?"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np

from mlsys_lab.exercises import memory_hierarchy as ex
from mlsys_lab.memory_hierarchy import simt


def verdict(check, fn) -> str:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        check(fn)
    return buffer.getvalue().strip()


def test_exercise_references_agree_with_simt():
    g = np.random.default_rng()
    for _ in range(20):
        addresses = g.integers(0, 5000, size=32)
        assert ex.reference_sectors(addresses, 4) == simt.sectors_per_request(addresses, 4)[0]
        assert ex.reference_bank_passes(addresses * 4, 4) == simt.bank_conflict_degree(addresses)[0]
        for size in (4, 8, 16):
            aligned = addresses * size
            assert ex.reference_bank_passes(aligned, size) == simt.shared_passes(aligned, size)[0]


def test_checks_accept_the_reference_and_reject_wrong_answers():
    assert verdict(ex.check_sectors, ex.reference_sectors).startswith("✓")
    no_straddle = lambda a, size: len({int(x) // 32 for x in a})  # noqa: E731
    assert verdict(ex.check_sectors, no_straddle).startswith("✗")
    assert verdict(ex.check_bank_passes, ex.reference_bank_passes).startswith("✓")
    no_broadcast = lambda a, size: int(np.bincount(np.asarray(a) // 4 % 32).max())  # noqa: E731
    assert verdict(ex.check_bank_passes, no_broadcast).startswith("✗")
    assert verdict(ex.check_tiled_matmul_bytes, ex.reference_tiled_matmul_bytes).startswith("✓")
    forgot_c = lambda m, n, k, t: 4 * ((n // t) * m * k + (m // t) * k * n)  # noqa: E731
    assert verdict(ex.check_tiled_matmul_bytes, forgot_c).startswith("✗")
