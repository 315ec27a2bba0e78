"""Do the searches respect their budget, and does a surrogate beat random search where it should?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.autotuning import search
from mlsys_lab.autotuning.space import recorded_space
from mlsys_lab.autotuning.stats import standardize


def test_searches_respect_budget_and_never_repeat():
    rng = np.random.default_rng()
    features = rng.standard_normal((60, 3))
    seconds = np.exp(rng.standard_normal(60))
    for strategy in (search.grid_search, search.random_search, search.model_guided_search):
        picked = strategy(features, seconds, 20, int(rng.integers(100)))
        assert len(picked) == 20 and len(set(picked.tolist())) == 20
        assert picked.min() >= 0 and picked.max() < 60
    with pytest.raises(ValueError, match="budget"):
        search.random_search(features, seconds, 61)


def test_model_guided_beats_random_on_a_smooth_bowl():
    """On a smooth landscape a surrogate should find the optimum with far fewer measurements."""
    grid = np.array([(i, j) for i in range(15) for j in range(15)], dtype=float)
    seconds = 1.0 + ((grid - [9, 4]) ** 2).sum(1)
    features = standardize(grid)
    def reach(strategy):
        curves = search.search_curves(strategy, features, seconds, 40, 8)
        return search.evaluations_to_reach(curves, within=1.0)

    guided, rand = reach(search.model_guided_search), reach(search.random_search)
    assert np.median(guided) < np.median(rand)


def test_curves_are_monotone_and_reach_counts():
    seconds = np.array([4.0, 3.0, 2.0, 1.0])
    curves = search.search_curves(search.random_search, np.zeros((4, 1)), seconds, 4, seeds=5)
    assert curves.shape == (5, 4) and np.all(np.diff(curves, axis=1) <= 0) and np.all(curves[:, -1] == 1.0)
    assert search.evaluations_to_reach(np.array([[2.0, 1.0], [3.0, 3.0]])).tolist() == [2, 3]


def test_strategy_curves_name_the_lesson_strategies():
    space = recorded_space()
    curves = search.strategy_curves("random", space, 10, seeds=3)
    assert curves.shape == (3, 10) and np.all(curves >= 1.0)
    np.testing.assert_array_equal(
        curves, search.search_curves(search.random_search, space["raw"], space["seconds"], 10, 3)
    )
    with pytest.raises(ValueError, match="strategy must be one of"):
        search.strategy_curves("annealing", space, 10)
