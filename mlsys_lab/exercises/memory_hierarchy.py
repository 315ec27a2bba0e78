"""Checks for the exercises of 04_memory_hierarchy: sectors per request, bank passes, tiled traffic."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng


def reference_sectors(byte_addresses, access_bytes: int) -> int:
    touched = set()
    for a in byte_addresses:
        touched.update(range(int(a) // 32, (int(a) + access_bytes - 1) // 32 + 1))
    return len(touched)


def reference_bank_passes(word_indices) -> int:
    per_bank: dict[int, set] = {}
    for w in word_indices:
        per_bank.setdefault(int(w) % 32, set()).add(int(w))
    return max(len(words) for words in per_bank.values())


def reference_tiled_matmul_bytes(m: int, n: int, k: int, tile: int) -> int:
    # each tile x tile block of C reads a tile x k strip of A and a k x tile strip of B; C written once
    return 4 * ((n // tile) * m * k + (m // tile) * k * n + m * n)


def _patterns(g, n: int, scale: int):
    lane = np.arange(32)
    out = []
    for _ in range(n):
        kind = int(g.integers(4))
        if kind == 0:
            out.append(lane * int(g.integers(0, 40)) + int(g.integers(0, 64)))
        elif kind == 1:
            out.append(g.integers(0, 64 * scale, size=32))
        elif kind == 2:
            out.append((lane // int(g.choice([2, 4, 8]))) * int(g.integers(1, 64)))
        else:
            out.append(lane[::-1] * int(g.integers(1, 9)))
    return [np.asarray(p, dtype=np.int64) for p in out]


def check_sectors(fn) -> None:
    """``fn(byte_addresses, access_bytes)`` -> distinct 32-byte sectors one warp's request touches."""
    lane = np.arange(32)
    cases = [
        Case("x[lane], float", (lane * 4, 4), expected=4),
        Case("x[32 * lane], float", (lane * 128, 4), expected=32),
        Case("x[lane] from byte 4", (lane * 4 + 4, 4), expected=5),
        # 16-byte loads 64 bytes apart from byte 24: each straddles two sectors no other lane touches
        Case("float4 x[4 * lane] from byte 24", (lane * 64 + 24, 16), expected=64),
    ]
    g = rng()
    for p in _patterns(g, 12, 64):
        size = int(g.choice([4, 8, 16]))
        addresses = p * size if int(g.integers(2)) else p
        cases.append(
            Case(
                f"addresses {addresses[:4].tolist()}..., {size} B",
                (addresses, size),
                expected=reference_sectors(addresses, size),
            )
        )
    check("sectors", fn, cases)


def check_bank_passes(fn) -> None:
    """``fn(word_indices)`` -> passes of one warp's shared-memory request (same word = broadcast)."""
    lane = np.arange(32)
    cases = [
        Case("words[lane]", (lane,), expected=1),
        Case("words[32 * lane]", (lane * 32,), expected=32),
        Case("all lanes read word 7", (np.full(32, 7),), expected=1),
        Case("tile[lane][0], 33 wide", (lane * 33,), expected=1),
    ]
    g = rng()
    for p in _patterns(g, 12, 4):
        cases.append(Case(f"words {p[:4].tolist()}...", (p,), expected=reference_bank_passes(p)))
    check("bank_passes", fn, cases)


def check_tiled_matmul_bytes(fn) -> None:
    """``fn(m, n, k, tile)`` -> bytes of HBM traffic of an fp32 matmul tiled in tile x tile blocks of C."""
    cases = [
        Case(
            "4096^3, tile 32",
            (4096, 4096, 4096, 32),
            expected=reference_tiled_matmul_bytes(4096, 4096, 4096, 32),
        ),
        Case("tile 1 (no reuse)", (64, 64, 64, 1), expected=4 * (2 * 64**3 + 64**2)),
    ]
    g = rng()
    for _ in range(10):
        tile = int(g.choice([8, 16, 32, 64, 128]))
        m, n, k = (tile * int(g.integers(1, 40)) for _ in range(3))
        cases.append(
            Case(
                f"m={m}, n={n}, k={k}, tile={tile}",
                (m, n, k, tile),
                expected=reference_tiled_matmul_bytes(m, n, k, tile),
            )
        )
    check("tiled_matmul_bytes", fn, cases)
