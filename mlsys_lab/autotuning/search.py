"""Search strategies over a measured configuration space, and their sample efficiency.

A configuration space is a finite table: ``features`` (n_configs, d) describing each configuration and
``seconds`` (n_configs,) its measured run time. Searches here replay a measured table, so a strategy's
*sample efficiency* (best time found after t measurements, over many seeds) costs no GPU time.

* strategies: :func:`grid_search` (and the factorial grid :func:`factorial_grid`), :func:`random_search`,
  :func:`model_guided_search` (a Gaussian-process
  surrogate with a lower-confidence-bound pick, as in Bayesian optimisation; Snoek et al. 2012);
* :func:`search_curves`: best-found/optimum after each evaluation, one row per seed;
* :func:`strategy_curves`: the lesson's four strategies by name, on a recorded space
  (:func:`mlsys_lab.autotuning.space.recorded_space`).

Shapes: features (n_configs, d); seconds (n_configs,); curves (n_seeds, budget).
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from mlsys_lab.autotuning.surrogate import check_table, gp_posterior
from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_number, check_type

Strategy = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]


def factorial_grid(n_values: Sequence[int], budget: int) -> list[tuple[int, ...]]:
    """The points of a full factorial grid that fits ``budget``: value indices per knob, in nested-loop order.

    Every knob gets the same number of points ``g`` (all its values if it has fewer), the largest ``g`` for
    which the grid still has at most ``budget`` points; a knob with ``L`` values is sampled at the cell
    centres ``(2 t + 1) L // (2 g)`` for t = 0..g-1 (g = 1 picks the middle value, g = L every value).
    With d knobs a grid of g points per knob costs g**d measurements: the curse of dimensionality that
    makes grids lose to random search (Bergstra & Bengio 2012).
    """
    if isinstance(n_values, (str, bytes)) or not hasattr(n_values, "__iter__"):
        raise TypeError(f"n_values must be a sequence of value counts, one per knob; got {n_values!r:.40}")
    sizes = [check_int("n_values", v, low=1) for v in n_values]
    if not sizes:
        raise ValueError("n_values must list at least one knob; got an empty list")
    budget = check_int("budget", budget, low=1)

    def count(g: int) -> int:
        return int(np.prod([min(size, g) for size in sizes]))

    g = 1
    while g < max(sizes) and count(g + 1) <= budget:
        g += 1
    axes = [[(2 * t + 1) * size // (2 * min(size, g)) for t in range(min(size, g))] for size in sizes]
    return list(itertools.product(*axes))


def grid_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """A regular sweep of a measured table: configs sorted in nested-loop (lexicographic) order of their
    ``features``, every (n / budget)-th one measured, from a seed-chosen offset within the first stride.

    A partly measured space has no complete factorial grid (:func:`factorial_grid`); this is the sweep a
    grid tuner makes through the configs that exist, the first knob varying slowest.
    """
    features, seconds = check_table(features, seconds)
    check_int("seed", seed, low=0)
    n = len(seconds)
    budget = check_int("budget", budget, low=1, high=n)
    features = np.asarray(features)
    if features.ndim == 2 and len(features) != n:
        raise ValueError(f"features must have one row per config of seconds ({n}); got shape {features.shape}")
    table_order = np.lexsort(features.T[::-1]) if features.ndim == 2 and features.shape[1] else np.arange(n)
    stride = n / budget
    offset = np.random.default_rng(seed).uniform(0, stride)
    return table_order[(np.floor(offset + stride * np.arange(budget)).astype(int)) % n]


def random_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """``budget`` distinct configs drawn uniformly at random."""
    features, seconds = check_table(features, seconds)
    check_int("seed", seed, low=0)
    budget = check_int("budget", budget, low=1, high=len(seconds))
    return np.random.default_rng(seed).permutation(len(seconds))[:budget]


def model_guided_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0,
                        n_initial: int = 8, kappa: float = 1.0) -> np.ndarray:
    """Start with ``n_initial`` random configs, then measure argmin of the GP's (mean - kappa * std).

    Works on log(seconds); ``features`` should be standardized. Only measured configs' times are used.
    """
    features, seconds = check_table(features, seconds)
    check_int("seed", seed, low=0)
    check_int("n_initial", n_initial, low=1)
    check_finite("kappa", kappa)
    n = len(seconds)
    budget = check_int("budget", budget, low=1, high=n)
    order = list(np.random.default_rng(seed).permutation(n)[:min(n_initial, budget)])
    log_seconds = np.log(np.asarray(seconds, dtype=float))
    while len(order) < budget:
        mean, std = gp_posterior(features[order], log_seconds[order], features)
        score = mean - kappa * std
        score[order] = np.inf
        order.append(int(np.argmin(score)))
    return np.asarray(order)


def search_curves(strategy: Strategy, features: np.ndarray, seconds: np.ndarray, budget: int,
                  seeds: int = 20) -> np.ndarray:
    """Best-found time / true best after each evaluation: shape (seeds, budget); 1.0 = found the optimum."""
    if not callable(strategy):
        raise TypeError(f"strategy must be a search function (features, seconds, budget, seed); got {strategy!r:.40}")
    features, seconds = check_table(features, seconds)
    seconds = np.asarray(seconds, dtype=float)
    rows = []
    for seed in range(check_int("seeds", seeds, low=1, high=10**4)):
        picked = strategy(features, seconds, budget, seed)
        rows.append(np.minimum.accumulate(seconds[picked]) / seconds.min())
    return np.vstack(rows)


def evaluations_to_reach(curves: np.ndarray, within: float = 1.05) -> np.ndarray:
    """Per seed: evaluations needed to find a config within ``within`` x the best (budget + 1 = never)."""
    curves = check_array("curves", curves, ndim=2, finite=True)
    check_number("within", within, low=1.0)
    hit = curves <= within
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, curves.shape[1] + 1)


STRATEGIES = ("grid", "random", "model: raw config", "model: instruction counts")


def strategy_curves(strategy: str, space: dict, budget: int, seeds: int = 20) -> np.ndarray:
    """(seeds, budget) best-found / optimum of one of ``STRATEGIES`` on a recorded ``space``.

    grid and random walk the raw configurations; the model-guided searches see the standardized raw
    configuration (``raw_std``) or the standardized static instruction counts (``static_std``).
    """
    check_type("space", space, dict)
    for key in ("raw", "seconds"):
        if key not in space:
            raise ValueError(f"space must be a recorded space (recorded_space()); it has no {key!r}")
    check_choice("strategy", strategy, STRATEGIES)
    budget = check_int("budget", budget, low=1, high=len(space["seconds"]))
    if strategy == "grid":
        fn, features = grid_search, space["raw"]
    elif strategy == "random":
        fn, features = random_search, space["raw"]
    else:
        fn = model_guided_search
        features = space["raw_std"] if strategy.endswith("config") else space["static_std"]
    return search_curves(fn, features, space["seconds"], budget, seeds)
