"""Matrix multiply as a loop nest, transformed step by step (numba kernels, float64, row-major).

    for i in range(n): for j in range(p): for k in range(m): C[i, j] += A[i, k] * B[k, j]

* :func:`matmul_ijk`, :func:`matmul_ikj`, :func:`matmul_jki`: loop interchange. The innermost loop
  decides the strides (see ``cache_model.misses_per_iteration``).
* :func:`matmul_tiled`: loop blocking/tiling of the ikj order (tile_i x tile_k x tile_j blocks).
* :func:`matmul_atb_naive`: C = A^T B with k innermost, the starting point of the lesson's tiling exercise.
* :func:`matmul_ijk_unroll_jam`: ijk with j unrolled by 4 and jammed: one A load feeds 4 outputs and
  one B cache line serves 4 dot products (Carr & Kennedy 1994).
* :func:`microkernel_source` / :func:`matmul_microkernel`: the register-blocked kernel of
  Goto & van de Geijn, "Anatomy of high-performance matrix multiplication" (TOMS 2008): A packed
  into panels of ``mr`` rows and B into panels of ``nr`` columns, an ``mr x nr`` block of C held in
  registers over the whole k loop, the block fully unrolled (the source is generated so you can read
  the unrolled code) and vectorized across the columns of the block by LLVM's SLP vectorizer.

Shapes: a (n, m), b (m, p), out (n, p). All kernels write into ``out`` and return it.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from numba import njit, prange
from numba.core import config as numba_config

from mlsys_lab.validation import check_array, check_choice, check_int


@njit(cache=True)
def matmul_ijk(a, b, out):
    """Innermost k: A row walked with stride 1, B column with stride p (a miss every step)."""
    n, m = a.shape
    p = b.shape[1]
    for i in range(n):
        for j in range(p):
            acc = 0.0
            for k in range(m):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc
    return out


@njit(cache=True)
def matmul_ikj(a, b, out):
    """Innermost j: B row and C row both stride 1, A[i, k] fixed: vectorizes, few misses."""
    n, m = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for i in range(n):
        for k in range(m):
            aik = a[i, k]
            for j in range(p):
                out[i, j] += aik * b[k, j]
    return out


@njit(cache=True)
def matmul_jki(a, b, out):
    """Innermost i: A column and C column both stride n: the worst order."""
    n, m = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for j in range(p):
        for k in range(m):
            bkj = b[k, j]
            for i in range(n):
                out[i, j] += a[i, k] * bkj
    return out


@njit(cache=True)
def matmul_tiled(a, b, out, tile_i, tile_k, tile_j):
    """ikj order, every loop blocked: a tile_i x tile_j block of C stays in cache while k sweeps."""
    n, m = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for i0 in range(0, n, tile_i):
        for k0 in range(0, m, tile_k):
            for j0 in range(0, p, tile_j):
                w = min(tile_j, p - j0)
                for i in range(i0, min(i0 + tile_i, n)):
                    c = out[i, j0:j0 + w]
                    for k in range(k0, min(k0 + tile_k, m)):
                        aik = a[i, k]
                        bk = b[k, j0:j0 + w]
                        for j in range(w):  # 0-based range over slices: j >= 0 provable, so it vectorizes
                            c[j] += aik * bk[j]
    return out


@njit(cache=True)
def matmul_ijk_unroll_jam(a, b, out):
    """ijk with the j loop unrolled by 4 and the four k loops jammed into one.

    Each A[i, k] loaded once feeds four dot products, and the four B[k, j..j+3] share one cache line,
    so the stride-p walk down B misses once per 4 outputs instead of once per output.
    """
    n, m = a.shape
    p = b.shape[1]
    main = p - p % 4
    for i in range(n):
        for j in range(0, main, 4):
            acc0 = acc1 = acc2 = acc3 = 0.0
            for k in range(m):
                aik = a[i, k]
                acc0 += aik * b[k, j]
                acc1 += aik * b[k, j + 1]
                acc2 += aik * b[k, j + 2]
                acc3 += aik * b[k, j + 3]
            out[i, j], out[i, j + 1], out[i, j + 2], out[i, j + 3] = acc0, acc1, acc2, acc3
        for j in range(main, p):  # remainder columns, peeled
            acc = 0.0
            for k in range(m):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc
    return out


@njit(cache=True)
def matmul_atb_naive(a, b, out):
    """C = A^T B, the textbook nest: for i, j: for k: C[i, j] += A[k, i] * B[k, j].

    Shapes: a (m, n), b (m, p), out (n, p). The innermost k walks *both* A and B down a column (stride n
    and stride p): a cache miss per operand per step, and a strict-order sum that cannot use SIMD. Each
    C[i, j] is summed in increasing k, so any reordering that keeps k increasing for every (i, j) gives
    the same bits (no fused multiply-add: numba does not contract without ``fastmath``).
    """
    m, n = a.shape
    p = b.shape[1]
    for i in range(n):
        for j in range(p):
            acc = 0.0
            for k in range(m):
                acc += a[k, i] * b[k, j]
            out[i, j] = acc
    return out


def microkernel_source(mr: int = 8, nr: int = 16) -> str:
    """Python source of the mr x nr register-blocked kernel, fully unrolled (mr * nr accumulators).

    Both operands come packed (see :func:`pack_panels`): ``a_panels[ib, k, :]`` is the column k of rows
    ``ib*mr .. ib*mr+mr-1`` of A, ``b_panels[jb, k, :]`` the row k of columns ``jb*nr .. jb*nr+nr-1`` of B,
    so every k step reads mr + nr contiguous numbers and does mr * nr multiply-adds.
    """
    mr, nr = check_int("mr", mr, low=1, high=16), check_int("nr", nr, low=1, high=32)
    lines = [
        "def kernel(a_panels, b_panels, out):",
        "    n_row_blocks, m, _ = a_panels.shape",
        "    n_panels = b_panels.shape[0]",
        "    for task in prange(n_row_blocks * n_panels):  # one mr x nr block of C per task",
        "        ib = task // n_panels",
        "        panel = task % n_panels",
        f"        i = ib * {mr}",
        f"        j = panel * {nr}",
    ]
    lines += ["        " + "; ".join(f"c{r}_{c} = 0.0" for c in range(nr)) for r in range(mr)]
    lines.append("        for k in range(m):")
    lines.append("            " + "; ".join(f"b{c} = b_panels[panel, k, {c}]" for c in range(nr)))
    for r in range(mr):
        lines.append(f"            a{r} = a_panels[ib, k, {r}]")
        lines.append("            " + "; ".join(f"c{r}_{c} += a{r} * b{c}" for c in range(nr)))
    for r in range(mr):
        lines.append("        " + "; ".join(f"out[i + {r}, j + {c}] = c{r}_{c}" for c in range(nr)))
    lines.append("    return out")
    return "\n".join(lines)


@contextlib.contextmanager
def _slp_vectorizer():
    """Turn on LLVM's SLP vectorizer (numba's ``NUMBA_SLP_VECTORIZE``, off by default) while compiling.

    numba reads the setting each time it builds the optimisation pipeline for a function, so this
    changes only what is compiled inside the block.
    """
    saved = numba_config.SLP_VECTORIZE
    numba_config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba_config.SLP_VECTORIZE = saved


_MICROKERNEL_SIGNATURE = "float64[:, ::1](float64[:, :, ::1], float64[:, :, ::1], float64[:, ::1])"


@functools.lru_cache(maxsize=16)
def _compiled_microkernel(mr: int, nr: int, slp: bool):
    """Compile the generated kernel. Two code generators, to compare in the lesson:

    * ``slp=True``: ``fastmath={"contract"}`` (fused multiply-add, no reassociation) and the SLP
      vectorizer, which packs the nr independent accumulators of a row of C into SIMD registers:
      one broadcast of a{r}, nr/8 FMAs on AVX-512 (zmm), nr/4 on AVX2 (ymm).
    * ``slp=False``: numba's defaults with ``fastmath=True``. Reassociation lets the *loop* vectorizer
      treat every accumulator as a reduction over k instead: 8 partial sums each, B read with
      stride nr, shuffles at the end. Same arithmetic, several times slower.
    """
    namespace = {"prange": prange}
    exec(microkernel_source(mr, nr), namespace)  # noqa: S102  (our own generated source)
    if not slp:
        return njit(_MICROKERNEL_SIGNATURE, parallel=True, fastmath=True)(namespace["kernel"])
    with _slp_vectorizer():
        return njit(_MICROKERNEL_SIGNATURE, parallel=True, fastmath={"contract"})(namespace["kernel"])


@njit(parallel=True, cache=True)
def pack_panels(b, nr):
    """Copy B (m, p) into panels (p // nr, m, nr): each panel's k-th row is nr contiguous numbers."""
    m, p = b.shape
    panels = np.empty((p // nr, m, nr), dtype=b.dtype)
    for panel in prange(p // nr):
        for k in range(m):
            for c in range(nr):
                panels[panel, k, c] = b[k, panel * nr + c]
    return panels


def matmul_microkernel(a: np.ndarray, b: np.ndarray, out: np.ndarray, mr: int = 8, nr: int = 16,
                       slp: bool = True) -> np.ndarray:
    """Packed, register-blocked, parallel matmul (packing of both operands included in the time).

    Needs n % mr == p % nr == 0 and C-contiguous float64 ``out``. ``slp`` picks the code generator
    (see :func:`_compiled_microkernel`).
    """
    mr, nr = check_int("mr", mr, low=1, high=16), check_int("nr", nr, low=1, high=32)
    n, p = a.shape[0], b.shape[1]
    if n % mr or p % nr:
        raise ValueError(f"n must be a multiple of mr={mr} and p of nr={nr}; got n={n}, p={p}")
    if out.dtype != np.float64 or not out.flags.c_contiguous or out.shape != (n, p):
        raise ValueError(f"out must be a C-contiguous float64 array of shape {(n, p)}; got {out.dtype} {out.shape}")
    # A's row panels are the column panels of A.T: panels[ib, k, r] = A.T[k, ib*mr + r] = A[ib*mr + r, k]
    return _compiled_microkernel(mr, nr, bool(slp))(pack_panels(a.T, mr), pack_panels(b, nr), out)


ORDER_CODES = {"ijk": 0, "ikj": 1, "jki": 2}


@njit(cache=True)
def _matmul_blocked(a, b, out, order, tile):
    n, m = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for i0 in range(0, n, tile):
        i1 = min(i0 + tile, n)
        for k0 in range(0, m, tile):
            k1 = min(k0 + tile, m)
            for j0 in range(0, p, tile):
                j1 = min(j0 + tile, p)
                if order == 0:
                    for i in range(i0, i1):
                        for j in range(j0, j1):
                            acc = out[i, j]
                            for k in range(k0, k1):
                                acc += a[i, k] * b[k, j]
                            out[i, j] = acc
                elif order == 1:
                    for i in range(i0, i1):
                        for k in range(k0, k1):
                            aik = a[i, k]
                            for j in range(j0, j1):
                                out[i, j] += aik * b[k, j]
                else:
                    for j in range(j0, j1):
                        for k in range(k0, k1):
                            bkj = b[k, j]
                            for i in range(i0, i1):
                                out[i, j] += a[i, k] * bkj
    return out


def matmul_blocked(a: np.ndarray, b: np.ndarray, out: np.ndarray, order: str = "ikj",
                   tile: int | None = None) -> np.ndarray:
    """Square tiles of side ``tile`` (None: untiled), loops inside a tile in ``order`` (ijk, ikj, jki).

    One compiled kernel serves every order and tile (they are run-time arguments), which is what the
    loop-order/tile explorer needs; the dedicated kernels above are faster for their one order.
    """
    check_choice("order", order, ORDER_CODES)
    for label, array in (("a", a), ("b", b), ("out", out)):  # before numba, whose errors name no argument
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{label} must be a 2-D NumPy array of floats; got {type(array).__name__}")
        check_array(label, array, ndim=2, kinds="f", min_size=0)
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"a (m, k), b (k, n) and out (m, n) must agree; got {a.shape}, {b.shape} and {out.shape}")
    n = max(a.shape[0], a.shape[1], b.shape[1])
    tile = n if tile is None else check_int("tile", tile, low=1, high=max(n, 1))
    return _matmul_blocked(a, b, out, ORDER_CODES[order], tile)
