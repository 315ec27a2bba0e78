"""Search strategies over a measured configuration space, and their sample efficiency.

A configuration space is a finite table: ``features`` (n_configs, d) describing each configuration and
``seconds`` (n_configs,) its measured run time. Searches here replay a measured table, so a strategy's
*sample efficiency* (best time found after t measurements, over many seeds) costs no GPU time.

* strategies: :func:`grid_search`, :func:`random_search`, :func:`model_guided_search` (a Gaussian-process
  surrogate with a lower-confidence-bound pick, as in Bayesian optimisation; Snoek et al. 2012);
* :func:`search_curves`: best-found/optimum after each evaluation, one row per seed;
* :func:`strategy_curves`: the lesson's four strategies by name, on a recorded space
  (:func:`mlsys_lab.autotuning.space.recorded_space`).

Shapes: features (n_configs, d); seconds (n_configs,); curves (n_seeds, budget).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mlsys_lab.autotuning.surrogate import gp_posterior
from mlsys_lab.validation import check_choice, check_int

Strategy = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]


def grid_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """A regular sweep: every (n / budget)-th config in table order, starting at a seed-chosen offset."""
    n = len(seconds)
    budget = check_int("budget", budget, low=1, high=n)
    stride = n / budget
    offset = np.random.default_rng(seed).uniform(0, stride)
    return (np.floor(offset + stride * np.arange(budget)).astype(int)) % n


def random_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    """``budget`` distinct configs drawn uniformly at random."""
    budget = check_int("budget", budget, low=1, high=len(seconds))
    return np.random.default_rng(seed).permutation(len(seconds))[:budget]


def model_guided_search(features: np.ndarray, seconds: np.ndarray, budget: int, seed: int = 0,
                        n_initial: int = 8, kappa: float = 1.0) -> np.ndarray:
    """Start with ``n_initial`` random configs, then measure argmin of the GP's (mean - kappa * std).

    Works on log(seconds); ``features`` should be standardized. Only measured configs' times are used.
    """
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
    seconds = np.asarray(seconds, dtype=float)
    rows = []
    for seed in range(check_int("seeds", seeds, low=1)):
        picked = strategy(features, seconds, budget, seed)
        rows.append(np.minimum.accumulate(seconds[picked]) / seconds.min())
    return np.vstack(rows)


def evaluations_to_reach(curves: np.ndarray, within: float = 1.05) -> np.ndarray:
    """Per seed: evaluations needed to find a config within ``within`` x the best (budget + 1 = never)."""
    hit = curves <= within
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, curves.shape[1] + 1)


STRATEGIES = ("grid", "random", "model: raw config", "model: instruction counts")


def strategy_curves(strategy: str, space: dict, budget: int, seeds: int = 20) -> np.ndarray:
    """(seeds, budget) best-found / optimum of one of ``STRATEGIES`` on a recorded ``space``.

    grid and random walk the raw configurations; the model-guided searches see the standardized raw
    configuration (``raw_std``) or the standardized static instruction counts (``static_std``).
    """
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
