"""Checks for the exercises of 04_memory_hierarchy: sectors per request, bank passes, tiled traffic."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, close_enough, rng
from mlsys_lab.exercises.memory_hierarchy_cuda import (  # noqa: F401  (re-exported)
    check_sgemm_tiled_cuda,
    check_softmax_rows_cuda,
    check_transpose_cuda,
)
from mlsys_lab.exercises.memory_hierarchy_mma_cuda import check_bf16_mma_cuda  # noqa: F401  (re-exported)
from mlsys_lab.memory_hierarchy.warp_sim import run_reduce, run_transpose


def reference_sectors(byte_addresses, access_bytes: int) -> int:
    touched = set()
    for a in byte_addresses:
        touched.update(range(int(a) // 32, (int(a) + access_bytes - 1) // 32 + 1))
    return len(touched)


def reference_bank_passes(byte_addresses, access_bytes: int) -> int:
    per_bank: dict[int, set] = {}
    for a in byte_addresses:
        for w in range(int(a) // 4, int(a) // 4 + access_bytes // 4):
            per_bank.setdefault(w % 32, set()).add(w)
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
        Case("broadcast x[0]", (np.zeros(32, dtype=np.int64), 4), expected=1),
        Case("float2 x[lane]", (lane * 8, 8), expected=8),
        Case("float2 x[2 * lane] from byte 28", (lane * 16 + 28, 8), expected=reference_sectors(lane * 16 + 28, 8)),
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
    """``fn(byte_addresses, access_bytes)`` -> passes of one warp's shared-memory request (4-, 8- or 16-byte
    accesses; the same word asked by several lanes is delivered once)."""
    lane = np.arange(32)
    cases = [
        Case("float4 tile[lane]", (lane * 16, 16), expected=4),
        Case("words[lane]", (lane * 4, 4), expected=1),
        Case("words[32 * lane]", (lane * 128, 4), expected=32),
        Case("all lanes read word 7", (np.full(32, 28), 4), expected=1),
        Case("tile[lane][0], 33 wide", (lane * 132, 4), expected=1),
        Case("float2 tile[lane]", (lane * 8, 8), expected=2),
        Case("float4 broadcast", (np.zeros(32, dtype=np.int64), 16), expected=1),
        Case("float4 tile[2 * lane]", (lane * 32, 16), expected=8),
        Case("float2 pairs of lanes share a word", ((lane // 2) * 8, 8), expected=1),
    ]
    g = rng()
    for p in _patterns(g, 14, 4):
        size = int(g.choice([4, 8, 16]))
        addresses = p * size
        cases.append(Case(f"addresses {addresses[:4].tolist()}..., {size} B", (addresses, size),
                          expected=reference_bank_passes(addresses, size)))
    check("bank_passes", fn, cases)


def check_tiled_matmul_bytes(fn) -> None:
    """``fn(m, n, k, tile)`` -> bytes of HBM traffic of an fp32 matmul tiled in tile x tile blocks of C."""
    cases = [
        Case("4096^3, tile 32", (4096, 4096, 4096, 32), expected=reference_tiled_matmul_bytes(4096, 4096, 4096, 32)),
        Case("tile 1 (no reuse)", (64, 64, 64, 1), expected=4 * (2 * 64**3 + 64**2)),
        Case("one tile", (16, 16, 16, 16), expected=reference_tiled_matmul_bytes(16, 16, 16, 16)),
        Case("m=64, n=256, k=32, tile 16", (64, 256, 32, 16), expected=reference_tiled_matmul_bytes(64, 256, 32, 16)),
        Case("m=512, n=128, k=8, tile 64", (512, 128, 8, 64), expected=reference_tiled_matmul_bytes(512, 128, 8, 64)),
    ]
    g = rng()
    for _ in range(10):
        tile = int(g.choice([8, 16, 32, 64, 128]))
        m, n, k = (tile * int(g.integers(1, 40)) for _ in range(3))
        cases.append(Case(f"m={m}, n={n}, k={k}, tile={tile}", (m, n, k, tile),
                          expected=reference_tiled_matmul_bytes(m, n, k, tile)))
    check("tiled_matmul_bytes", fn, cases)


# ---------------------------------------------------------------------------------- kernels in the simulator
# The learner's kernel runs block by block in mlsys_lab.memory_hierarchy.warp_sim; the arrays it indexes stay
# here (graded: its A[i], tile[i] = v go over the socket) and every count below comes from what they recorded.
TILE = 32
TILE_WORDS = TILE * (TILE + 1)  # room for one padding word per row
BLOCK_ELEMENTS = 256  # the block sum: 256 threads, 8 warps, one element each
MAX_REQUESTS = 256  # per block: the transpose needs 128 warp requests, the block sum 60


def reference_transpose_tiled(bx, by, A, B, tile, n_rows, n_cols) -> None:
    lane = np.arange(TILE)
    for r in range(TILE):  # warp-row r stores tile[r][lane] = A[by*32 + r, bx*32 + lane]: coalesced read
        tile[r * TILE + lane] = A[(by * TILE + r) * n_cols + bx * TILE + lane]
    for r in range(TILE):  # B[bx*32 + r, by*32 + lane] = tile[lane][r]: coalesced write, column of the tile
        B[(bx * TILE + r) * n_rows + by * TILE + lane] = tile[lane * TILE + r]


def reference_transpose_padded(bx, by, A, B, tile, n_rows, n_cols) -> None:
    lane, width = np.arange(TILE), TILE + 1  # one padding word per row: column lane*33 + r hits 32 banks
    for r in range(TILE):
        tile[r * width + lane] = A[(by * TILE + r) * n_cols + bx * TILE + lane]
    for r in range(TILE):
        B[(bx * TILE + r) * n_rows + by * TILE + lane] = tile[lane * width + r]


def reference_block_sum(bx, x, out, partial) -> None:
    lane = np.arange(32)
    for w in range(BLOCK_ELEMENTS // 32):  # each warp stores its 32 elements: coalesced, conflict-free
        t = w * 32 + lane
        partial[t] = x[bx * BLOCK_ELEMENTS + t]
    s = BLOCK_ELEMENTS // 2
    while s >= 1:  # sequential addressing: threads t < s add partial[t + s] into partial[t]
        for w in range(0, s, 32):
            t = w + lane[: min(32, s - w)]
            partial[t] = partial[t] + partial[t + s]
        s //= 2
    out[bx] = partial[0]


def _transpose_shapes(g) -> list[tuple[int, int]]:
    shapes = [(32, 64), (32, 32), (64, 32)]  # the example, one tile, the other non-square grid
    shapes.append((32 * int(g.integers(1, 3)), 32 * int(g.integers(1, 4))))
    return shapes


def _transpose_check(name: str, fn, conflict_free: bool) -> None:
    g = rng()
    last: dict = {}

    def run(n_rows: int, n_cols: int, seed: int) -> np.ndarray:
        a = np.random.default_rng(seed).permutation(n_rows * n_cols).astype(np.float32).reshape(n_rows, n_cols)
        got, last["counts"] = run_transpose(fn, a, TILE_WORDS, max_requests=MAX_REQUESTS)
        return got

    def budget(got) -> str | None:
        c = last["counts"]
        n = got.size
        data_sectors = n * 4 // 32  # each matrix's bytes in 32-byte sectors
        if c.load_sectors > data_sectors:
            return f"A read in {c.load_sectors} sectors; its {n * 4} bytes fit in {data_sectors}: reads not coalesced"
        if c.store_sectors > data_sectors:
            return (f"B written in {c.store_sectors} sectors; its {n * 4} bytes fit in {data_sectors}: "
                    "writes not coalesced")
        if c.shared_words_stored < n or c.shared_words_loaded < n:
            return (f"{c.shared_words_stored} words stored to the tile and {c.shared_words_loaded} loaded, "
                    f"for {n} elements: every element must pass through shared memory")
        if conflict_free and c.shared_passes > 2 * n // 32:
            return (f"{c.shared_passes} shared-memory passes for {c.shared_requests} requests; conflict-free is "
                    f"{2 * n // 32} (one pass per 32 words stored or loaded)")
        return None

    cases = []
    for n_rows, n_cols in _transpose_shapes(g):
        seed = int(g.integers(2**31))
        a = np.random.default_rng(seed).permutation(n_rows * n_cols).astype(np.float32).reshape(n_rows, n_cols)
        cases.append(Case(f"A {n_rows} x {n_cols}", (n_rows, n_cols, seed), expected=a.T.copy(),
                          check_result=budget))
    check(name, run, cases, figure=lambda: simulator_figure(last["counts"], cases[-1].args[0] * cases[-1].args[1]))


def simulator_figure(counts, n_elements: int) -> str:
    """A kernel's performance by the simulator's counts on the last case: its global traffic against the fewest
    sectors its data fits in, and its shared passes per request (1.00 is conflict-free)."""
    fewest = 2 * n_elements * 4 // 32  # read once and written once, in 32-byte sectors
    sectors = counts.load_sectors + counts.store_sectors
    per_request = counts.shared_passes / max(counts.shared_requests, 1)
    return (f"global traffic at {fewest / max(sectors, 1):.0%} of the fewest sectors; "
            f"{per_request:.2f} shared passes per request (warp simulator)")


def check_transpose_tiled(fn) -> None:
    """``fn(bx, by, A, B, tile, n_rows, n_cols)``, one block's 32 x 32 tile of B = A.T through shared memory:
    correct on 5 shapes, A read and B written in the fewest sectors, every element staged in ``tile``."""
    _transpose_check("transpose_tiled", fn, conflict_free=False)


def check_transpose_padded(fn) -> None:
    """As :func:`check_transpose_tiled`, and every shared-memory request takes a single pass."""
    _transpose_check("transpose_padded", fn, conflict_free=True)


def block_sum_passes(block_elements: int = BLOCK_ELEMENTS) -> int:
    """Passes of the sequential-addressing tree per block: the stores, 3 conflict-free requests per active
    warp per level, and the final read of partial[0]."""
    passes, s = block_elements // 32, block_elements // 2
    while s >= 1:
        passes += 3 * -(-s // 32)
        s //= 2
    return passes + 1


def check_block_sum(fn) -> None:
    """``fn(bx, x, out, partial)``: block bx sums x[256 bx : 256 (bx + 1)] through shared ``partial`` into out[bx];
    x read in the fewest sectors, all 256 values staged in ``partial``, and no more bank passes than the
    sequential-addressing tree takes."""
    g = rng()
    last: dict = {}

    def run(x) -> np.ndarray:
        got, last["counts"] = run_reduce(fn, x, BLOCK_ELEMENTS, max_requests=MAX_REQUESTS)
        return got

    def budget(got) -> str | None:
        c, blocks = last["counts"], np.size(got)
        if c.load_sectors > blocks * BLOCK_ELEMENTS * 4 // 32:
            return f"x read in {c.load_sectors} sectors for {blocks * BLOCK_ELEMENTS * 4 // 32} sectors of data"
        if c.shared_words_stored < blocks * BLOCK_ELEMENTS:
            return (f"{c.shared_words_stored} words stored to partial for {blocks * BLOCK_ELEMENTS} elements: "
                    "the block's threads must combine their values through shared memory")
        if c.shared_passes > blocks * block_sum_passes():
            return (f"{c.shared_passes} shared-memory passes in {c.shared_requests} requests; the conflict-free "
                    f"tree takes {blocks * block_sum_passes()} ({block_sum_passes()} per block)")
        return None

    example = np.arange(2 * BLOCK_ELEMENTS, dtype=np.float32)
    cases = [Case("x = 0..511, 2 blocks", (example,), expected=np.array([32640.0, 98176.0]), check_result=budget),
             Case("x = ones, 1 block", (np.ones(BLOCK_ELEMENTS, dtype=np.float32),), expected=np.array([256.0]),
                  check_result=budget)]
    for blocks in (3, int(g.integers(1, 5))):
        x = g.random(blocks * BLOCK_ELEMENTS, dtype=np.float32)
        cases.append(Case(f"{blocks} blocks of random x", (x,),
                          expected=x.reshape(blocks, -1).astype(np.float64).sum(axis=1), check_result=budget))
    def figure() -> str:
        c = last["counts"]
        fewest = cases[-1].args[0].size * 4 // 32
        return (f"x read at {fewest / max(c.load_sectors, 1):.0%} of the fewest sectors; "
                f"{c.shared_passes / max(c.shared_requests, 1):.2f} shared passes per request (warp simulator)")

    check("block_sum", run, cases, compare=lambda got, exp: close_enough(got, exp, rtol=1e-5, atol=1e-4),
          figure=figure)
