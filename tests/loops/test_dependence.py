"""Do the legality rules (distance vectors) agree with the textbook examples?"""

from __future__ import annotations

import pytest

from mlsys_lab.loops import dependence


def test_dependence_textbook_examples():
    """Do the legality rules agree with Allen & Kennedy's examples?"""
    # a[i][j] = a[i-1][j+1]: distance (1, -1). Interchange would make it (-1, 1): illegal.
    assert dependence.interchange_legal([(1, -1)], (0, 1))
    assert not dependence.interchange_legal([(1, -1)], (1, 0))
    assert not dependence.tiling_legal([(1, -1)])
    # Skewing the inner loop by 1 gives (1, 0): now interchange and tiling are legal.
    assert dependence.skew([(1, -1)], 1).tolist() == [[1, 0]]
    assert dependence.tiling_legal(dependence.skew([(1, -1)], 1))
    # matmul's only dependence is on k (the reduction): every order is legal, i and j are parallel.
    assert len(dependence.legal_orders([(0, 0, 1)])) == 6
    assert dependence.parallel_loops([(0, 0, 1)]) == [0, 1]


def test_wavefront_skew_makes_inner_loop_parallel():
    """After skewing j' = i + j and swapping loops, is the inner loop of the DP free of carried deps?"""
    vectors = [(1, 0), (0, 1), (1, 1)]
    assert dependence.parallel_loops(vectors) == []
    skewed = dependence.skew(vectors, 1)
    assert skewed.tolist() == [[1, 1], [0, 1], [1, 2]]
    swapped = dependence.permute(skewed, (1, 0))
    assert dependence.is_legal(swapped)
    assert dependence.parallel_loops(swapped) == [1]


def test_fusion_and_unroll_and_jam_rules():
    """Fusion may read only values already produced; unroll-and-jam is a local interchange."""
    assert dependence.fusion_legal(0, [0, -1])
    assert not dependence.fusion_legal(0, [1])
    assert dependence.unroll_and_jam_legal([(0, 1)])
    assert not dependence.unroll_and_jam_legal([(1, -1)])


def test_bad_vectors_give_named_errors():
    with pytest.raises(ValueError, match="order must be a permutation"):
        dependence.permute([(1, 0)], (0, 0))
    with pytest.raises(ValueError, match="factor"):
        dependence.skew([(1, 0)], -1)


def test_a_lexicographically_negative_dependence_is_refused():
    """Is a dependence whose sink runs before its source refused, while a transformed nest may hold one?"""
    for call in (lambda v: dependence.permute(v, (1, 0)), dependence.legal_orders, dependence.tiling_legal,
                 lambda v: dependence.skew(v, 1), lambda v: dependence.apply_transformation(v, [(0, 1), (1, 0)])):
        with pytest.raises(ValueError, match=r"vectors must be dependences.*\(0, -1\) at index 1"):
            call([(1, -1), (0, -1)])
    assert not dependence.is_legal([(-1, 1)])  # a transformed nest's vector: the answer, not an error
    assert dependence.parallel_loops([(-1, 1)]) == [1]
