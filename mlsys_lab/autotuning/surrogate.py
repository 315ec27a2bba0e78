"""A Gaussian-process surrogate of run time: predicts log(seconds) of configurations not measured yet, with its
uncertainty, from the ones measured (Rasmussen & Williams, *Gaussian Processes for Machine Learning*, 2006).

Shapes: features (n_configs, d), standardized (:func:`mlsys_lab.autotuning.stats.standardize`); targets (n,).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_finite, check_int, check_positive


def check_table(features, seconds) -> tuple[np.ndarray, np.ndarray]:
    """A measured table: ``seconds`` (n,) finite times > 0 and ``features`` with one row per config (n, d)."""
    seconds = check_array("seconds", seconds, ndim=1, finite=True)
    if (seconds <= 0).any():
        raise ValueError(f"seconds must be run times > 0; got {seconds.min():g}")
    features = check_array("features", features, ndim=(1, 2), finite=True)
    if len(features) != len(seconds):
        raise ValueError(f"features must have one row per config of seconds ({len(seconds)}); "
                         f"got shape {features.shape}")
    return features, seconds


def gp_posterior(x_train: np.ndarray, y_train: np.ndarray, x_query: np.ndarray,
                 length_scale: float | None = None, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of a GP with an RBF kernel (Rasmussen & Williams 2006, alg. 2.1).

    k(a, b) = exp(-|a - b|² / (2 l²)); ``y_train`` is standardized inside; l defaults to sqrt(d).
    """
    x_train = np.atleast_2d(check_array("x_train", x_train, ndim=(1, 2), finite=True))
    x_query = np.atleast_2d(check_array("x_query", x_query, ndim=(1, 2), finite=True))
    y_train = check_array("y_train", y_train, ndim=1, finite=True)
    if len(y_train) != len(x_train):
        raise ValueError(f"y_train must hold one value per row of x_train ({len(x_train)}); got {len(y_train)}")
    if x_query.shape[1] != x_train.shape[1]:
        raise ValueError(f"x_query must have the {x_train.shape[1]} columns of x_train; got shape {x_query.shape}")
    noise = check_finite("noise", noise, low=0.0)
    length_scale = np.sqrt(x_train.shape[1]) if length_scale is None else check_positive("length_scale",
                                                                                          length_scale)
    mean, scale = y_train.mean(), y_train.std() or 1.0
    target = (y_train - mean) / scale

    def kernel(a, b):
        squared = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-squared / (2 * length_scale**2))

    gram = kernel(x_train, x_train) + noise * np.eye(len(x_train))
    try:
        chol = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError as error:
        raise ValueError(f"noise must be > 0 when x_train repeats a point (the kernel matrix is singular); "
                         f"got {noise:g}") from error
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
    cross = kernel(x_query, x_train)
    v = np.linalg.solve(chol, cross.T)
    variance = np.clip(1.0 - (v**2).sum(0), 1e-12, None)
    return mean + scale * (cross @ alpha), scale * np.sqrt(variance)


def cross_validated_predictions(features: np.ndarray, seconds: np.ndarray, folds: int = 5, seed: int = 0,
                                **gp_options) -> np.ndarray:
    """Held-out predictions of log(seconds): each config predicted by a GP fit on the other folds."""
    features, seconds = check_table(features, seconds)
    folds = check_int("folds", folds, low=2, high=len(seconds))
    check_int("seed", seed, low=0)
    target = np.log(np.asarray(seconds, dtype=float))
    assignment = np.random.default_rng(seed).permutation(len(target)) % folds
    predicted = np.empty_like(target)
    for fold in range(folds):
        held = assignment == fold
        predicted[held], _ = gp_posterior(features[~held], target[~held], features[held], **gp_options)
    return np.exp(predicted)
