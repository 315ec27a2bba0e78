"""Matrix multiply as a loop nest, transformed step by step (numba kernels, float64, row-major).

    for i in range(n): for j in range(p): for k in range(m): C[i, j] += A[i, k] * B[k, j]

* :func:`matmul_ijk`, :func:`matmul_ikj`, :func:`matmul_jki`: loop interchange. The innermost loop
  decides the strides (see ``cache_model.misses_per_iteration``).
* :func:`matmul_tiled`: loop blocking/tiling of the ikj order (tile_i x tile_k x tile_j blocks).
* :func:`matmul_unroll_jam`: the i loop unrolled by 4 and jammed into the j loop: each B[k, j]
  loaded once feeds four rows (4 FMAs per load instead of 1); tiled and parallel over row blocks.
* :func:`microkernel_source` / :func:`matmul_microkernel`: the register-blocked kernel of
  Goto & van de Geijn, "Anatomy of high-performance matrix multiplication" (TOMS 2008): B packed
  into panels of ``nr`` columns, an ``mr x nr`` block of C held in registers over the whole k loop,
  the block fully unrolled (the source is generated so you can read the unrolled code).

Shapes: a (n, m), b (m, p), out (n, p). All kernels write into ``out`` and return it.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from mlsys_lab.validation import check_int


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
                        for j in range(w):  # a 0-based range over slices: numba can prove j >= 0 and vectorize
                            c[j] += aik * bk[j]
    return out


@njit(parallel=True, fastmath=True, cache=True)
def matmul_unroll_jam(a, b, out, tile_i, tile_k, tile_j):
    """Tiled ikj with i unrolled by 4 and jammed into j; row blocks spread over cores (prange)."""
    n, m = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for bi in prange((n + tile_i - 1) // tile_i):
        i0 = bi * tile_i
        i1 = min(i0 + tile_i, n)
        for k0 in range(0, m, tile_k):
            k1 = min(k0 + tile_k, m)
            for j0 in range(0, p, tile_j):
                w = min(tile_j, p - j0)
                i = i0
                while i + 3 < i1:
                    c0 = out[i, j0:j0 + w]
                    c1 = out[i + 1, j0:j0 + w]
                    c2 = out[i + 2, j0:j0 + w]
                    c3 = out[i + 3, j0:j0 + w]
                    for k in range(k0, k1):
                        a0, a1, a2, a3 = a[i, k], a[i + 1, k], a[i + 2, k], a[i + 3, k]
                        bk = b[k, j0:j0 + w]
                        for j in range(w):
                            bkj = bk[j]
                            c0[j] += a0 * bkj
                            c1[j] += a1 * bkj
                            c2[j] += a2 * bkj
                            c3[j] += a3 * bkj
                    i += 4
                while i < i1:  # peeled remainder rows
                    c = out[i, j0:j0 + w]
                    for k in range(k0, k1):
                        aik = a[i, k]
                        bk = b[k, j0:j0 + w]
                        for j in range(w):
                            c[j] += aik * bk[j]
                    i += 1
    return out


def microkernel_source(mr: int = 4, nr: int = 8) -> str:
    """Python source of the mr x nr register-blocked kernel, fully unrolled (mr * nr accumulators)."""
    mr, nr = check_int("mr", mr, low=1, high=8), check_int("nr", nr, low=1, high=32)
    lines = [
        "def kernel(a, b_panels, out):",
        "    n, m = a.shape",
        "    n_panels = b_panels.shape[0]",
        f"    for task in prange((n // {mr}) * n_panels):  # one mr x nr block of C per task",
        f"        i = (task // n_panels) * {mr}",
        "        panel = task % n_panels",
        f"        j = panel * {nr}",
    ]
    lines += ["        " + "; ".join(f"c{r}_{c} = 0.0" for c in range(nr)) for r in range(mr)]
    lines.append("        for k in range(m):")
    lines.append("            " + "; ".join(f"b{c} = b_panels[panel, k, {c}]" for c in range(nr)))
    for r in range(mr):
        lines.append(f"            a{r} = a[i + {r}, k]")
        lines.append("            " + "; ".join(f"c{r}_{c} += a{r} * b{c}" for c in range(nr)))
    lines += ["        " + "; ".join(f"out[i + {r}, j + {c}] = c{r}_{c}" for c in range(nr)) for r in range(mr)]
    lines.append("    return out")
    return "\n".join(lines)


@functools.lru_cache(maxsize=8)
def _compiled_microkernel(mr: int, nr: int):
    namespace = {"prange": prange}
    exec(microkernel_source(mr, nr), namespace)  # noqa: S102  (our own generated source)
    return njit(parallel=True, fastmath=True)(namespace["kernel"])


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


def matmul_microkernel(a: np.ndarray, b: np.ndarray, out: np.ndarray, mr: int = 4, nr: int = 8) -> np.ndarray:
    """Packed, register-blocked, parallel matmul (packing included in the time). n % mr == p % nr == 0."""
    n, p = a.shape[0], b.shape[1]
    if n % mr or p % nr:
        raise ValueError(f"matmul_microkernel needs n divisible by mr={mr} and p by nr={nr}; got n={n}, p={p}")
    return _compiled_microkernel(mr, nr)(a, pack_panels(b, nr), out)


def flop(n: int, m: int | None = None, p: int | None = None) -> int:
    """Floating-point operations of an (n x m) @ (m x p) product: 2 n m p (one multiply, one add)."""
    m = n if m is None else m
    p = n if p is None else p
    return 2 * n * m * p
