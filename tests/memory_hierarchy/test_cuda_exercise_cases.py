"""Are the cases of lesson 04's softmax and SGEMM kernel checks what their prompts say, on any machine?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.exercises.memory_hierarchy_cuda import (
    SOFTMAX_RTOL,
    Product,
    product_bound,
    same_product,
    sgemm_cases,
    softmax_cases,
)
from mlsys_lab.kernels.memory_hierarchy.fused import softmax_reference
from mlsys_lab.kernels.memory_hierarchy.sgemm import STEPS, sgemm_reference


def test_softmax_cases_cover_the_boundaries_and_stay_below_the_timed_size():
    """Does every seed draw the 13 cases, each expecting rows that sum to 1, with an increasing row among them?"""
    for seed in range(5):
        cases = softmax_cases(np.random.default_rng(seed))
        assert len(cases) == 13
        shapes = [c.args[0].shape for c in cases]
        assert (0, 7) in shapes and (1, 1) in shapes and any(s[1] == 1 for s in shapes)
        assert any(s[1] % 4 for s in shapes) and any(s[1] == 50257 for s in shapes)
        for case in cases:
            x = case.args[0]
            assert x.dtype == np.float32 and case.expected.shape == x.shape and x.size < 2**24
            if x.size:
                np.testing.assert_allclose(case.expected.sum(axis=1), 1.0, rtol=1e-5)
        rising = next(c.args[0] for c in cases if c.label.startswith("increasing"))
        assert (np.diff(rising, axis=1) >= 0).all()


def test_softmax_cases_catch_an_unshifted_exp():
    """Would exp(x) without the max overflow float32 on the +-1e4 rows and the example (x = 1000)?"""
    cases = softmax_cases(np.random.default_rng(0))
    with np.errstate(over="ignore", invalid="ignore"):
        for label in ("the example", "rows of exactly"):
            x = next(c.args[0] for c in cases if c.label.startswith(label))
            e = np.exp(x)
            assert not np.isfinite(e / e.sum(axis=1, keepdims=True)).all()


def test_softmax_tolerance_separates_a_dropped_term():
    """Is one element left out of a 3000-wide row's sum outside the tolerance, for the row's largest element?"""
    x = np.random.default_rng(1).standard_normal((1, 3000)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max())
    dropped = e / (e.sum() - e[0, np.argmax(x)])
    assert not np.allclose(dropped, softmax_reference(x), rtol=SOFTMAX_RTOL, atol=1e-12)


def test_sgemm_cases_include_every_edge_and_k_zero():
    """Do the cases include K = 0 (C is zeros), M, N, K of 1 and shapes off the 128 x 128 x 8 tile?"""
    cases = sgemm_cases(np.random.default_rng(0))
    assert len(cases) == 14
    shapes = [(a.shape[0], b.shape[1], a.shape[1]) for a, b in (c.args for c in cases)]
    assert (70, 90, 0) in shapes and (1, 1, 1) in shapes and (65, 33, 17) in shapes and (127, 129, 31) in shapes
    zero = next(c for c in cases if c.args[0].shape[1] == 0)
    assert not zero.expected.c.any() and not zero.expected.bound.any()
    bm, bn, bk = STEPS["blocktile_2d"].tile
    assert any(m % bm and n % bn and k % bk for m, n, k in shapes)
    assert np.array_equal(cases[0].expected.c, [[5, 8, 11, 14], [-4, 8, 20, 32]])


@pytest.mark.parametrize("k", [1, 7, 17, 128, 1001])
def test_product_bound_holds_for_float32_sums_and_rejects_a_dropped_term(k):
    """Does a float32 product summed one k at a time land inside the bound, and one that drops k = 0 outside it?"""
    g = np.random.default_rng(k)
    a, b = g.standard_normal((40, k)).astype(np.float32), g.standard_normal((k, 30)).astype(np.float32)
    acc = np.zeros((40, 30), dtype=np.float32)
    for i in range(k):
        acc = (acc + np.outer(a[:, i], b[i]).astype(np.float32)).astype(np.float32)
    expected = Product(sgemm_reference(a, b), product_bound(np.abs(a).astype(np.float64) @ np.abs(b), k))
    assert same_product(acc, expected)
    assert not same_product(acc - np.outer(a[:, 0], b[0]).astype(np.float32), expected)
    assert not same_product(acc.astype(np.float64)[:, :-1], expected)  # a shape that is not C's
    nan = acc.copy()
    nan[3, 4] = np.nan
    assert not same_product(nan, expected)
