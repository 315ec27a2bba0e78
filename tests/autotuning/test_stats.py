"""Are the ranks and Spearman's correlation right on hand-worked examples?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.autotuning import stats


def test_ranks_and_spearman_by_hand():
    np.testing.assert_allclose(stats.ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])
    assert stats.spearman([1, 2, 3], [10, 100, 1000]) == pytest.approx(1.0)
    assert stats.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Textbook example: d = rank differences (0, 1, -1, 0, 0): rho = 1 - 6*2/(5*24) = 0.9.
    assert stats.spearman([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="equal length"):
        stats.spearman([1, 2], [1, 2, 3])


def test_standardize_gives_zero_mean_unit_spread_and_zeroes_constant_columns():
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    np.testing.assert_allclose(stats.standardize(x), [[-1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(stats.standardize(np.array([[0.0], [np.e - 1]]), log=True), [[-1.0], [1.0]])
