"""Loop skewing: a dynamic-programming recurrence made parallel along its wavefronts.

    cost table c (n, m);  best[i, j] = c[i, j] + min(best[i-1, j], best[i, j-1], best[i-1, j-1])

Distance vectors (1, 0), (0, 1), (1, 1): both loops carry a dependence, neither can run in parallel.
Skewing j' = i + j turns them into (1, 1), (0, 1), (1, 2); interchanging to (j', i) gives
(1, 1), (1, 0), (2, 1): the outer loop over anti-diagonals t = i + j carries everything, and the
cells of one anti-diagonal are independent (Lamport, "The parallel execution of DO loops", CACM 1974;
Wolfe, "Loop skewing: the wavefront method revisited", 1986). Cells are grouped into blocks so
each parallel task is big enough to pay for its scheduling (skewing + tiling).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from mlsys_lab.validation import check_int


@njit(cache=True)
def min_path_serial(cost):
    """Row by row: the reference order. Border: best[0, :] and best[:, 0] are prefix sums."""
    n, m = cost.shape
    best = np.empty_like(cost)
    best[0, 0] = cost[0, 0]
    for j in range(1, m):
        best[0, j] = best[0, j - 1] + cost[0, j]
    for i in range(1, n):
        best[i, 0] = best[i - 1, 0] + cost[i, 0]
        for j in range(1, m):
            best[i, j] = cost[i, j] + min(best[i - 1, j], best[i, j - 1], best[i - 1, j - 1])
    return best


@njit(cache=True)
def _block(cost, best, i0, i1, j0, j1):
    # Slices starting at column j0 - 1 so that every index below is provably >= 0 (no wraparound check).
    width = j1 - j0
    for i in range(i0, i1):
        above = best[i - 1, j0 - 1:j1]
        row = best[i, j0 - 1:j1]
        here = cost[i, j0:j1]
        for jj in range(width):
            row[jj + 1] = here[jj] + min(above[jj + 1], row[jj], above[jj])


@njit(parallel=True, cache=True)
def min_path_wavefront(cost, block):
    """Blocks on one anti-diagonal (bi + bj = t) run in parallel; anti-diagonals run in order.

    The borders (row 0, column 0) are prefix sums done first; blocks tile the interior [1, n) x [1, m).
    """
    n, m = cost.shape
    best = np.empty_like(cost)
    best[0, 0] = cost[0, 0]
    for j in range(1, m):
        best[0, j] = best[0, j - 1] + cost[0, j]
    for i in range(1, n):
        best[i, 0] = best[i - 1, 0] + cost[i, 0]
    n_bi = (n - 1 + block - 1) // block
    n_bj = (m - 1 + block - 1) // block
    for t in range(n_bi + n_bj - 1):
        first = max(0, t - n_bj + 1)
        last = min(t, n_bi - 1)
        for bi in prange(first, last + 1):
            bj = t - bi
            i0 = 1 + bi * block
            j0 = 1 + bj * block
            _block(cost, best, i0, min(i0 + block, n), j0, min(j0 + block, m))
    return best


def wavefront_count(n_blocks_i: int, n_blocks_j: int) -> np.ndarray:
    """Blocks available to run at once on each anti-diagonal: the parallelism the skew exposes."""
    check_int("n_blocks_i", n_blocks_i, low=1, high=2**24)
    check_int("n_blocks_j", n_blocks_j, low=1, high=2**24)
    t = np.arange(n_blocks_i + n_blocks_j - 1)
    return np.minimum.reduce([t + 1, np.full_like(t, n_blocks_i), np.full_like(t, n_blocks_j),
                              n_blocks_i + n_blocks_j - 1 - t])
