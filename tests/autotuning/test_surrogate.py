"""Does the Gaussian process interpolate its data, doubt far from it, and predict held-out times?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.autotuning import surrogate


def test_gp_interpolates_and_is_unsure_far_away():
    x = np.array([[0.0], [1.0], [2.0]])
    y = np.array([1.0, 3.0, 2.0])
    mean, std = surrogate.gp_posterior(x, y, np.array([[1.0], [10.0]]), length_scale=1.0, noise=1e-6)
    assert mean[0] == pytest.approx(3.0, abs=1e-3)
    assert std[1] > 10 * std[0]
    assert mean[1] == pytest.approx(y.mean(), abs=1e-3)  # reverts to the mean far from data


def test_cross_validated_predictions_follow_a_smooth_trend():
    """log(seconds) linear in one feature: held-out predictions stay within 10% of the truth."""
    x = np.linspace(-1, 1, 40)[:, None]
    seconds = np.exp(1.0 + 0.5 * x[:, 0])
    predicted = surrogate.cross_validated_predictions(x, seconds, folds=4, seed=0, length_scale=1.0)
    assert predicted.shape == seconds.shape
    assert np.max(np.abs(predicted / seconds - 1)) < 0.1
    with pytest.raises(ValueError, match="folds"):
        surrogate.cross_validated_predictions(x, seconds, folds=1)
