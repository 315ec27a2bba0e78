"""Are lesson 02's checks proven? The reference passes every seed; each plausible wrong answer fails every seed."""

from __future__ import annotations

import itertools

import numpy as np
from catalogue import Catalogue, catalogue_tests
from numba import njit

from mlsys_lab.exercises.loops import (
    check_atb_tiled,
    check_legal_orders,
    check_lru_misses,
    check_misses_per_iteration,
    check_transformation_legal,
)
from mlsys_lab.loops.matmul import matmul_atb_naive


# --------------------------------------------------------------------------------------------- legal orders
def positive(v):
    for entry in v:
        if entry != 0:
            return entry > 0
    return True


def orders_where(vectors, keep):
    depth = len(vectors[0])
    return [order for order in itertools.permutations(range(depth)) if keep(order)]


def legal_reference(vectors):
    return orders_where(vectors, lambda o: all(positive([v[d] for d in o]) for v in vectors))


def legal_inverse_permutation(vectors):
    return orders_where(vectors, lambda o: all(positive([v[o.index(d)] for d in range(len(o))]) for v in vectors))


CATALOGUE_LEGAL = {
    "every order (dependences ignored)": lambda vs: orders_where(vs, lambda o: True),
    "only the original order": lambda vs: [tuple(range(len(vs[0])))],
    "first entry >= 0 instead of lexicographic": lambda vs: orders_where(vs, lambda o: all(v[o[0]] >= 0 for v in vs)),
    "every entry >= 0 (the tiling test)": lambda vs: orders_where(vs, lambda o: all(min(v) >= 0 for v in vs)),
    "the inverse permutation applied": legal_inverse_permutation,
    "only the first vector checked": lambda vs: legal_reference(vs[:1]),
}


# ------------------------------------------------------------------------------------------ misses per iteration
def misses_with(order, per_line, *, unit=None, row=1.0, fixed=0.0, arrays=(("i", "k"), ("k", "j"), ("i", "j")),
                innermost=-1):
    unit = 1 / per_line if unit is None else unit
    loop = order[innermost]
    total = 0.0
    for first, second in arrays:
        total += unit if loop == second else row if loop == first else fixed
    return total


CATALOGUE_MISSES = {
    "row and column strides swapped": lambda o, L: misses_with(o, L, unit=1.0, row=1 / L),
    "a fixed array costs 1/L, not 0": lambda o, L: misses_with(o, L, fixed=1 / L),
    "elements_per_line ignored (8 assumed)": lambda o, L: misses_with(o, 8),
    "the outermost loop read as the innermost": lambda o, L: misses_with(o, L, innermost=0),
    "1 // L (integer division)": lambda o, L: misses_with(o, L, unit=1 // L),
    "C left out": lambda o, L: misses_with(o, L, arrays=(("i", "k"), ("k", "j"))),
}


# ------------------------------------------------------------------------------------ transformation legality
def carried_by(vectors):
    levels = set()
    for v in vectors:
        nonzero = [d for d, e in enumerate(v) if e != 0]
        if nonzero:
            levels.add(nonzero[0])
    return levels


def transform_with(vectors, matrix, *, legal_test=positive, transpose=False, parallel_from_original=False,
                   parallel_all_zero=False):
    t = np.asarray(matrix)
    new = [(t.T if transpose else t) @ np.asarray(v) for v in vectors]
    legal = all(legal_test(v) for v in new)
    source = [np.asarray(v) for v in vectors] if parallel_from_original else new
    depth = len(new[0])
    if parallel_all_zero:
        parallel = [d for d in range(depth) if all(v[d] == 0 for v in source)]
    else:
        parallel = [d for d in range(depth) if d not in carried_by(source)]
    return bool(legal), parallel


def transformation_reference(vectors, matrix):
    return transform_with(vectors, matrix)


def strictly_positive(v):
    return any(e != 0 for e in v) and positive(v)


CATALOGUE_TRANSFORM = {
    "T transposed (d T instead of T d)": lambda vs, t: transform_with(vs, t, transpose=True),
    "every entry >= 0 (the tiling test)": lambda vs, t: transform_with(vs, t, legal_test=lambda v: min(v) >= 0),
    "a loop-independent (zero) dependence called illegal": lambda vs, t: transform_with(vs, t,
                                                                                         legal_test=strictly_positive),
    "parallel loops of the original nest": lambda vs, t: transform_with(vs, t, parallel_from_original=True),
    "parallel only where every entry is zero": lambda vs, t: transform_with(vs, t, parallel_all_zero=True),
    "legal when the first entry is > 0": lambda vs, t: transform_with(vs, t, legal_test=lambda v: v[0] > 0),
}


# ---------------------------------------------------------------------------------- interchange + tiling of A^T B
@njit(cache=True)
def atb_reference(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for i0 in range(0, n, tile):
        for k0 in range(0, m, tile):
            for j0 in range(0, p, tile):
                w = min(tile, p - j0)
                for i in range(i0, min(i0 + tile, n)):
                    c = out[i, j0:j0 + w]
                    for k in range(k0, min(k0 + tile, m)):
                        aki = a[k, i]
                        bk = b[k, j0:j0 + w]
                        for j in range(w):  # 0-based range over slices: LLVM can vectorize it
                            c[j] += aki * bk[j]
    return out


@njit(cache=True)
def atb_drops_remainder(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for i0 in range(0, n - n % tile, tile):
        for k0 in range(0, m - m % tile, tile):
            for j0 in range(0, p - p % tile, tile):
                for i in range(i0, i0 + tile):
                    for k in range(k0, k0 + tile):
                        for j in range(j0, j0 + tile):
                            out[i, j] += a[k, i] * b[k, j]
    return out


@njit(cache=True)
def atb_not_zeroed(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    for i in range(n):
        for k in range(m):
            aki = a[k, i]
            for j in range(p):
                out[i, j] += aki * b[k, j]
    return out


@njit(cache=True)
def atb_two_accumulators(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    for i in range(n):
        for j in range(p):
            even = odd = 0.0
            for k in range(0, m - 1, 2):
                even += a[k, i] * b[k, j]
                odd += a[k + 1, i] * b[k + 1, j]
            if m % 2:
                even += a[m - 1, i] * b[m - 1, j]
            out[i, j] = even + odd
    return out


@njit(cache=True)
def atb_i_innermost(a, b, out, tile):
    m, n = a.shape
    p = b.shape[1]
    out[:] = 0.0
    for k in range(m):
        for j in range(p):
            bkj = b[k, j]
            for i in range(n):
                out[i, j] += a[k, i] * bkj
    return out


def atb_blas(a, b, out, tile):
    np.matmul(a.T, b, out=out)
    return out


CATALOGUE_ATB = {
    "the naive nest (k innermost)": lambda a, b, out, tile: matmul_atb_naive(a, b, out),
    "NumPy's a.T @ b (BLAS sums in another order)": atb_blas,
    "remainder tiles dropped": atb_drops_remainder,
    "out not zeroed first": atb_not_zeroed,
    "k unrolled by 2 with two accumulators (reassociated)": atb_two_accumulators,
    "interchanged the wrong way (i innermost, C walked by column)": atb_i_innermost,
}

# ---------------------------------------------------------------------------------------- an LRU cache on a trace
def lru_with(addresses, line_bytes, n_sets, ways, *, refresh=True, evict_oldest=True, set_of=None, line_of=None,
             capacity=None, first_stamp=1):
    """A set-associative cache with stamps (the learner's likely shape), each knob one way of getting it wrong."""
    capacity = ways if capacity is None else capacity
    tags: list[list[int]] = [[-1] * capacity for _ in range(n_sets)]
    stamps: list[list[int]] = [[0] * capacity for _ in range(n_sets)]
    misses, clock = 0, first_stamp - 1
    for address in np.asarray(addresses).tolist():
        line = address // line_bytes if line_of is None else line_of(address)
        s = line % n_sets if set_of is None else set_of(address, line)
        clock += 1
        if line in tags[s]:
            if refresh:
                stamps[s][tags[s].index(line)] = clock
            continue
        misses += 1
        if first_stamp == 0:  # the first access's stamp (0) ties with the empty ways' and min() takes the first
            victim = stamps[s].index(min(stamps[s]))
        elif -1 in tags[s]:
            victim = tags[s].index(-1)
        else:
            pick = min if evict_oldest else max
            victim = stamps[s].index(pick(stamps[s]))
        tags[s][victim], stamps[s][victim] = line, clock
    return misses


def lru_reference(addresses, line_bytes, n_sets, ways):
    return lru_with(addresses, line_bytes, n_sets, ways)


CATALOGUE_LRU = {
    "FIFO: a hit does not refresh its line": lambda t, L, S, W: lru_with(t, L, S, W, refresh=False),
    "evicts the most recently used line": lambda t, L, S, W: lru_with(t, L, S, W, evict_oldest=False),
    "set from the byte address, not the line": lambda t, L, S, W: lru_with(t, L, S, W, set_of=lambda a, line: a % S),
    "ways ignored (direct-mapped)": lambda t, L, S, W: lru_with(t, L, S, W, capacity=1),
    "sets ignored (fully associative, S x W lines)": lambda t, L, S, W: lru_with(t, L, 1, S * W),
    "one line too many per set (evicts at ways + 1)": lambda t, L, S, W: lru_with(t, L, S, W, capacity=W + 1),
    "line_bytes read as elements of 8 bytes": lambda t, L, S, W: lru_with(t, L, S, W,
                                                                      line_of=lambda a: a // max(L // 8, 1)),
    "every address its own line": lambda t, L, S, W: lru_with(t, L, S, W, line_of=lambda a: a),
    "clock starts at 0: the first line ties with the empty ways": lambda t, L, S, W: lru_with(t, L, S, W,
                                                                                          first_stamp=0),
    "only compulsory misses (distinct lines)": lambda t, L, S, W: len({a // L for a in np.asarray(t).tolist()}),
    "the example's answer, 4, for every trace": lambda t, L, S, W: 4,
}

CATALOGUES = [
    Catalogue("lru_misses", check_lru_misses, lru_reference, CATALOGUE_LRU),
    Catalogue("legal_orders", check_legal_orders, legal_reference, CATALOGUE_LEGAL),
    Catalogue("misses_per_iteration", check_misses_per_iteration, lambda o, L: misses_with(o, L), CATALOGUE_MISSES),
    Catalogue("transformation_legal", check_transformation_legal, transformation_reference, CATALOGUE_TRANSFORM),
    Catalogue("atb_tiled", check_atb_tiled, atb_reference, CATALOGUE_ATB),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
