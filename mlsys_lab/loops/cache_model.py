"""A small cache model: how many cache lines a loop nest misses, by simulation and by formula.

Two views of the same thing:

* :func:`misses_per_iteration` is the textbook estimate (Bryant & O'Hallaron, *CS:APP* 3e, §6.6.2)
  for an untiled n x n matmul whose matrices do not fit in cache: in the innermost loop an array
  walked with stride 1 misses once per line (1 / elements_per_line), one walked with stride n
  misses every time (1), one that does not move misses never (0).
* :func:`simulate_matmul_misses` replays the exact address stream of a (tiled) matmul through a
  set-associative LRU cache, so tile sizes and capacity effects show up too.

The notebook checks both against measured run times.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from mlsys_lab.loops.matmul import ORDER_CODES
from mlsys_lab.validation import check_choice, check_divisible, check_int

LOOP_ORDERS = ("ijk", "ikj", "jik", "jki", "kij", "kji")
TILES = (4, 8, 16, 32, 64, 128)  # the tile sides the loop-order explorer offers
L1_BYTES, LINE_BYTES, WAYS = 32 * 1024, 64, 8  # a typical L1 data cache
# C[i, j] += A[i, k] * B[k, j]: which loop indices each array's (row, column) uses.
ARRAY_INDICES = {"A": ("i", "k"), "B": ("k", "j"), "C": ("i", "j")}


def inner_stride(array: str, order: str) -> str:
    """How ``array`` moves in the innermost loop of ``order``: 'unit', 'row' (stride n) or 'fixed'."""
    check_choice("order", order, LOOP_ORDERS)
    check_choice("array", array, ARRAY_INDICES)
    row, column = ARRAY_INDICES[array]
    innermost = order[-1]
    if innermost == column:
        return "unit"
    if innermost == row:
        return "row"
    return "fixed"


def misses_per_iteration(order: str, elements_per_line: int) -> dict[str, float]:
    """Cache misses per innermost iteration of an untiled row-major matmul, per array (CS:APP model).

    unit stride -> 1 / elements_per_line, stride n -> 1, fixed -> 0. With 64-byte lines of float64
    (8 per line): ijk 1.125, ikj 0.25, jki 2.0 misses per iteration.
    """
    elements_per_line = check_int("elements_per_line", elements_per_line, low=1)
    cost = {"unit": 1.0 / elements_per_line, "row": 1.0, "fixed": 0.0}
    per_array = {name: cost[inner_stride(name, order)] for name in ARRAY_INDICES}
    per_array["total"] = sum(per_array.values())
    return per_array


@njit(cache=True)
def _simulate(n, perm, tile, n_sets, ways, line_elements):
    # tags[set, way] holds a line number, stamps[set, way] its last use; LRU evicts the oldest.
    tags = np.full((n_sets, ways), -1, dtype=np.int64)
    stamps = np.zeros((n_sets, ways), dtype=np.int64)
    misses = np.zeros(3, dtype=np.int64)
    idx = np.zeros(3, dtype=np.int64)
    base = np.array([0, n * n, 2 * n * n], dtype=np.int64)  # A, B, C laid out one after another
    clock = 0
    for t0 in range(0, n, tile):
        for t1 in range(0, n, tile):
            for t2 in range(0, n, tile):
                for x0 in range(t0, min(t0 + tile, n)):
                    idx[perm[0]] = x0
                    for x1 in range(t1, min(t1 + tile, n)):
                        idx[perm[1]] = x1
                        for x2 in range(t2, min(t2 + tile, n)):
                            idx[perm[2]] = x2
                            i, j, k = idx[0], idx[1], idx[2]
                            for a in range(3):
                                if a == 0:
                                    element = base[0] + i * n + k
                                elif a == 1:
                                    element = base[1] + k * n + j
                                else:
                                    element = base[2] + i * n + j
                                line = element // line_elements
                                s = line % n_sets
                                clock += 1
                                hit = False
                                oldest = 0
                                for w in range(ways):
                                    if tags[s, w] == line:
                                        stamps[s, w] = clock
                                        hit = True
                                        break
                                    if stamps[s, w] < stamps[s, oldest]:
                                        oldest = w
                                if not hit:
                                    misses[a] += 1
                                    tags[s, oldest] = line
                                    stamps[s, oldest] = clock
    return misses


def simulate_matmul_misses(n: int, order: str = "ijk", tile: int | None = None, cache_bytes: int = 32 * 1024,
                           line_bytes: int = 64, ways: int = 8, element_bytes: int = 8) -> dict[str, int]:
    """Replay C[i,j] += A[i,k] * B[k,j] (all loops tiled by ``tile``) through a set-associative LRU cache.

    Returns misses per array and in total. ``tile=None`` means untiled. The trace has 3 n³ accesses:
    keep n <= ~200 for interactive use. Loop order names the loops outermost first ("ikj").
    """
    n = check_int("n", n, low=1, high=1024)
    check_choice("order", order, LOOP_ORDERS)
    tile = n if tile is None else check_int("tile", tile, low=1, high=n)
    element_bytes = check_int("element_bytes", element_bytes, low=1, high=16)
    line_bytes = check_divisible("line_bytes", check_int("line_bytes", line_bytes, low=element_bytes, high=4096),
                                 element_bytes)
    ways = check_int("ways", ways, low=1, high=1024)
    # up to 256 MiB: the simulator keeps a tag and a stamp (16 bytes) per cache line
    cache_bytes = check_int("cache_bytes", cache_bytes, low=line_bytes * ways, high=2**28)
    n_sets = cache_bytes // (line_bytes * ways)
    perm = np.array(["ijk".index(c) for c in order], dtype=np.int64)
    misses = _simulate(n, perm, tile, n_sets, ways, line_bytes // element_bytes)
    result = {"A": int(misses[0]), "B": int(misses[1]), "C": int(misses[2])}
    result["total"] = sum(result.values())
    return result


@functools.lru_cache(maxsize=8)
def miss_curves(n: int, tiles: tuple[int, ...] = TILES) -> dict[str, np.ndarray]:
    """Simulated misses per inner iteration (total / n³) of a typical L1 (32 KiB, 64-byte lines, 8 ways), for
    each loop order of :func:`~mlsys_lab.loops.matmul.matmul_blocked` over ``tiles`` (a tile >= n: untiled)."""
    return {order: np.array([simulate_matmul_misses(n, order, min(t, n), L1_BYTES, LINE_BYTES, WAYS)["total"]
                             for t in tiles]) / n**3 for order in ORDER_CODES}


def tile_fits(tile: int, cache_bytes: int, element_bytes: int = 8, n_tiles: int = 3) -> bool:
    """The rule of thumb for choosing a tile: ``n_tiles`` tiles of tile x tile elements fit the cache."""
    for name, value in (("tile", tile), ("cache_bytes", cache_bytes), ("element_bytes", element_bytes),
                        ("n_tiles", n_tiles)):
        check_int(name, value, low=1)
    return n_tiles * tile * tile * element_bytes <= cache_bytes


def matmul_trace(n: int, order: str = "ijk", tile: int | None = None, element_bytes: int = 8) -> np.ndarray:
    """Byte addresses of C[i,j] += A[i,k] * B[k,j] in execution order: the trace a cache sees.

    Each iteration reads A[i,k], B[k,j] and C[i,j], in that order (3 n³ addresses, int64). A, B and C are
    row-major n x n arrays laid out one after another from address 0 (A at 0, B at n² elements, C at 2 n²),
    the layout and order :func:`simulate_matmul_misses` replays. ``tile`` tiles all three loops (``None``:
    untiled; the last tile of a loop may be partial). Loop order names the loops outermost first ("ikj").
    """
    n = check_int("n", n, low=1, high=64)
    check_choice("order", order, LOOP_ORDERS)
    tile = n if tile is None else check_int("tile", tile, low=1, high=n)
    element_bytes = check_int("element_bytes", element_bytes, low=1, high=16)
    loops = np.indices((n, n, n)).reshape(3, -1)  # loops[d]: the value of the d-th loop, outermost first
    # execution order: by tile of each loop (outermost first), then by the loops themselves
    loops = loops[:, np.lexsort((loops[2], loops[1], loops[0], loops[2] // tile, loops[1] // tile,
                                 loops[0] // tile))]
    i, j, k = (loops[order.index(name)] for name in "ijk")
    elements = np.stack([i * n + k, n * n + k * n + j, 2 * n * n + i * n + j], axis=1)  # (n³, 3): A, B, C
    return (elements.reshape(-1) * element_bytes).astype(np.int64)
