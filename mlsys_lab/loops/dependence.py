"""Dependence vectors and the legality of loop transformations.

A loop nest ``for i: for j: ...`` that writes ``a[i, j]`` from ``a[i - 1, j + 1]`` carries the
*distance vector* ``(1, -1)``: the value is produced one ``i``-iteration and minus one
``j``-iteration earlier. Every transformation reorders iterations; it is legal when every
dependence still points forward, i.e. every transformed distance vector is *lexicographically
positive* (its first non-zero entry is > 0). Allen & Kennedy, *Optimizing Compilers for Modern
Architectures* (2001), ch. 2-5; Wolf & Lam, "A loop transformation theory" (PLDI 1991).

Vectors are tuples of ints, outermost loop first; shape of an array of them: (n_deps, depth).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from mlsys_lab.validation import check_array, check_int, check_sequence


def _as_vectors(vectors: Sequence[Sequence[int]], name: str = "vectors", *, dependences: bool = True) -> np.ndarray:
    """Vectors as an (n_deps, depth) int64 array. ``dependences``: they are a nest's dependences, so none may be
    lexicographically negative (a sink cannot run before its source); a transformed nest's vectors, which
    is_legal and parallel_loops judge, may be."""
    array = np.asarray(check_array(name, vectors, kinds="iu", min_size=0), dtype=np.int64)  # distances: integers
    if array.ndim != 2 or array.shape[1] < 1:
        raise ValueError(f"{name} must be a list of equal-length integer tuples (outermost loop first); "
                         f"got shape {array.shape}")
    if dependences and array.size:
        nonzero = array != 0
        first = np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), 0)  # each vector's first non-zero entry
        negative = np.flatnonzero(array[np.arange(array.shape[0]), first] < 0)
        if negative.size:
            i = int(negative[0])
            raise ValueError(f"{name} must be dependences, each lexicographically positive or zero (its first "
                             f"non-zero entry > 0: the source runs before the sink); got {tuple(array[i].tolist())} "
                             f"at index {i}")
    return array


def lexicographically_positive(vector: Sequence[int]) -> bool:
    """True when the first non-zero entry is positive: the source runs before the sink."""
    check_array("vector", vector, ndim=1, kinds="iu", min_size=0)
    for entry in vector:
        if entry != 0:
            return entry > 0
    return False  # the zero vector is a loop-independent dependence, not carried by any loop


def is_legal(vectors: Sequence[Sequence[int]]) -> bool:
    """A schedule is legal when no dependence points backwards (every vector is positive or zero): ``vectors``
    are a transformed nest's, so a negative one is the answer False, not an error."""
    return all(lexicographically_positive(v) or not np.any(v) for v in _as_vectors(vectors, dependences=False))


def permute(vectors: Sequence[Sequence[int]], order: Sequence[int]) -> np.ndarray:
    """Distance vectors after loop interchange to ``order`` (``order[0]`` becomes outermost)."""
    for i in check_sequence("order", order):
        check_int("order", i)
    array = _as_vectors(vectors)
    if sorted(order) != list(range(array.shape[1])):
        raise ValueError(f"order must be a permutation of 0..{array.shape[1] - 1}; got {tuple(order)}")
    return array[:, list(order)]


def interchange_legal(vectors: Sequence[Sequence[int]], order: Sequence[int]) -> bool:
    """Loop interchange / permutation to ``order`` is legal iff every permuted vector stays positive."""
    return is_legal(permute(vectors, order))


def legal_orders(vectors: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Every loop order (a permutation of loop indices, outermost first) that keeps all dependences."""
    depth = check_int("the depth of vectors", _as_vectors(vectors).shape[1], high=8)  # depth! orders are tried
    return [order for order in itertools.permutations(range(depth)) if interchange_legal(vectors, order)]


def apply_transformation(vectors: Sequence[Sequence[int]], matrix: Sequence[Sequence[int]]) -> np.ndarray:
    """Distance vectors after a unimodular loop transformation ``T``: each d becomes T d (Wolf & Lam 1991).

    Interchange is a permutation matrix, reversal of loop r a -1 on the diagonal at r, skewing loop j by f
    times loop i the identity plus f at (j, i); a sequence of them is the product of their matrices.
    Shapes: vectors (n_deps, depth), matrix (depth, depth); returns (n_deps, depth).
    """
    check_array("matrix", matrix, ndim=2, kinds="iu")
    array = _as_vectors(vectors)
    t = np.asarray(matrix, dtype=np.int64)
    if t.shape != (array.shape[1], array.shape[1]):
        raise ValueError(f"matrix must be {array.shape[1]} x {array.shape[1]} (the depth of the vectors); "
                         f"got shape {t.shape}")
    if round(abs(np.linalg.det(t))) != 1:
        raise ValueError(f"matrix must be unimodular (integer, determinant +-1); got determinant "
                         f"{np.linalg.det(t):.3g}")
    return array @ t.T


def tiling_legal(vectors: Sequence[Sequence[int]]) -> bool:
    """Rectangular tiling of all loops is legal when the band is *fully permutable*: every entry >= 0."""
    return bool(np.all(_as_vectors(vectors) >= 0))


def parallel_loops(vectors: Sequence[Sequence[int]]) -> list[int]:
    """Loops (by depth) whose iterations may run in parallel: no dependence is *carried* by them.

    Loop ``d`` carries a dependence when the vector's first non-zero entry sits at depth ``d``.
    """
    array = _as_vectors(vectors, dependences=False)  # a transformed nest's vectors too (legal or not)
    carried = set()
    for v in array:
        nonzero = np.flatnonzero(v)
        if nonzero.size:
            carried.add(int(nonzero[0]))
    return [d for d in range(array.shape[1]) if d not in carried]


def skew(vectors: Sequence[Sequence[int]], factor: int, outer: int = 0, inner: int = 1) -> np.ndarray:
    """Skew loop ``inner`` by ``factor`` times loop ``outer``: j' = j + factor * i, so d_j' = d_j + f d_i.

    Skewing is always legal (it keeps lexicographic order); it is done to make a later interchange or
    tiling legal, e.g. the wavefront of a dynamic-programming table.
    """
    factor = check_int("factor", factor, low=0, high=2**31)
    array = _as_vectors(vectors).copy()
    check_int("outer", outer, low=0, high=array.shape[1] - 1)
    check_int("inner", inner, low=0, high=array.shape[1] - 1)
    array[:, inner] += factor * array[:, outer]
    return array


def unroll_and_jam_legal(vectors: Sequence[Sequence[int]], outer: int = 0, inner: int = 1) -> bool:
    """Unroll-and-jam of ``outer`` into ``inner`` is legal when interchanging those two loops would be.

    Jamming runs a few ``outer`` iterations inside one ``inner`` iteration: a local interchange.
    """
    depth = _as_vectors(vectors).shape[1]
    check_int("outer", outer, low=0, high=depth - 1)
    check_int("inner", inner, low=0, high=depth - 1)
    order = list(range(depth))
    order[outer], order[inner] = order[inner], order[outer]
    return interchange_legal(vectors, order)


def fusion_legal(producer_writes_at: int, consumer_reads_at: Sequence[int]) -> bool:
    """Fusing ``for i: b[i] = f(a[i])`` with ``for i: c[i] = g(b[i + o])`` is legal when every offset o <= 0.

    After fusion iteration i runs the consumer right after the producer: it may read only values of
    ``b`` already written, i.e. at index i + o with o <= 0 (``producer_writes_at`` shifts the write).
    """
    check_int("producer_writes_at", producer_writes_at)
    for offset in check_sequence("consumer_reads_at", consumer_reads_at):
        check_int("consumer_reads_at", offset)
    return all(offset - producer_writes_at <= 0 for offset in consumer_reads_at)
