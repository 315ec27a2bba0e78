"""A Gaussian-process surrogate of run time: predicts log(seconds) of configurations not measured yet, with its
uncertainty, from the ones measured (Rasmussen & Williams, *Gaussian Processes for Machine Learning*, 2006).

Shapes: features (n_configs, d), standardized (:func:`mlsys_lab.autotuning.stats.standardize`); targets (n,).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_int, check_positive


def gp_posterior(x_train: np.ndarray, y_train: np.ndarray, x_query: np.ndarray,
                 length_scale: float | None = None, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of a GP with an RBF kernel (Rasmussen & Williams 2006, alg. 2.1).

    k(a, b) = exp(-|a - b|² / (2 l²)); ``y_train`` is standardized inside; l defaults to sqrt(d).
    """
    x_train, x_query = np.atleast_2d(x_train), np.atleast_2d(x_query)
    length_scale = np.sqrt(x_train.shape[1]) if length_scale is None else check_positive("length_scale",
                                                                                          length_scale)
    mean, scale = y_train.mean(), y_train.std() or 1.0
    target = (y_train - mean) / scale

    def kernel(a, b):
        squared = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-squared / (2 * length_scale**2))

    gram = kernel(x_train, x_train) + noise * np.eye(len(x_train))
    chol = np.linalg.cholesky(gram)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
    cross = kernel(x_query, x_train)
    v = np.linalg.solve(chol, cross.T)
    variance = np.clip(1.0 - (v**2).sum(0), 1e-12, None)
    return mean + scale * (cross @ alpha), scale * np.sqrt(variance)


def cross_validated_predictions(features: np.ndarray, seconds: np.ndarray, folds: int = 5, seed: int = 0,
                                **gp_options) -> np.ndarray:
    """Held-out predictions of log(seconds): each config predicted by a GP fit on the other folds."""
    folds = check_int("folds", folds, low=2, high=len(seconds))
    target = np.log(np.asarray(seconds, dtype=float))
    assignment = np.random.default_rng(seed).permutation(len(target)) % folds
    predicted = np.empty_like(target)
    for fold in range(folds):
        held = assignment == fold
        predicted[held], _ = gp_posterior(features[~held], target[~held], features[held], **gp_options)
    return np.exp(predicted)
