"""Rank statistics and feature scaling: does a coordinate order configurations as their run times do?

Spearman's rank correlation (Spearman 1904) compares orders, not values: 1 when two quantities sort the
configurations the same way, -1 when reversed, about 0 when unrelated. Shapes: 1-D arrays of one length.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.validation import check_array, check_bool


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank (as in Spearman's definition)."""
    values = np.asarray(check_array("values", values, ndim=1, min_size=0), dtype=float)
    order = np.argsort(values, kind="mergesort")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranked)
    return (sums / counts)[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation: the Pearson correlation of the ranks (1 = same order, -1 = reversed)."""
    x = np.asarray(check_array("x", x, ndim=1, finite=True), dtype=float)
    y = np.asarray(check_array("y", y, ndim=1, finite=True), dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must be 1-D of equal length >= 2; got {x.shape} and {y.shape}")
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def standardize(features: np.ndarray, log: bool = False) -> np.ndarray:
    """Columns to zero mean, unit spread (constant columns to 0); ``log`` takes log1p first (counts)."""
    x = np.asarray(check_array("features", features, ndim=(1, 2), finite=True), dtype=float)
    if check_bool("log", log):
        x = np.log1p(np.maximum(x, 0))
    spread = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
