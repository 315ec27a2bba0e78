"""Checks for the exercises of 05_autotuning."""

from __future__ import annotations

import numpy as np

from mlsys_lab.autotuning.stats import spearman
from mlsys_lab.exercises import Case, check, rng


class CountingMeasure:
    """A stand-in for timing a configuration: ``measure(i)`` returns seconds and counts the calls."""

    def __init__(self, seconds: np.ndarray) -> None:
        self.seconds = seconds
        self.calls: list[int] = []

    def __call__(self, index: int) -> float:
        self.calls.append(int(index))
        return float(self.seconds[int(index)])


def _search_case(label: str, seconds: np.ndarray, budget: int, seed: int) -> Case:
    measure = CountingMeasure(seconds)

    def verdict(result) -> str | None:
        calls = measure.calls
        if len(calls) > budget:
            return f"measured {len(calls)} configs; the budget is {budget}"
        if len(set(calls)) != len(calls):
            return "measured the same config twice (a wasted measurement)"
        if len(calls) < min(budget, len(seconds)):
            return f"measured only {len(calls)} configs; the budget allows {min(budget, len(seconds))}"
        if not calls or int(result) not in calls or seconds[int(result)] != min(seconds[c] for c in calls):
            return f"returned {result}, not the fastest config it measured"
        return None

    return Case(label, (measure, len(seconds), budget, seed), expected=None, check_result=verdict)


def check_random_search(fn) -> None:
    """``fn(measure, n_configs, budget, seed)`` -> index of the fastest config among ``budget`` measured."""
    g = rng()
    cases = [_search_case("10 configs, budget 3", np.arange(10, 0, -1.0), 3, 0),
             _search_case("budget larger than the space", np.array([3.0, 1.0, 2.0]), 10, 1)]
    for _ in range(8):
        n, budget = int(g.integers(2, 400)), int(g.integers(1, 60))
        seconds = g.lognormal(0, 1, n)
        cases.append(_search_case(f"{n} configs, budget {budget}", seconds, budget, int(g.integers(99))))
    check("random_search", fn, cases, compare=lambda got, expected: True)


def check_spearman(fn) -> None:
    """``fn(x, y)`` -> Spearman rank correlation (ties take their average rank)."""
    cases = [Case("same order", (np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])), expected=1.0),
             Case("reversed", (np.array([1.0, 2, 3]), np.array([3.0, 2, 1])), expected=-1.0),
             Case("with a tie", (np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])),
                  expected=spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])))]
    g = rng()
    for _ in range(9):
        n = int(g.integers(3, 200))
        x = g.integers(0, 20, n).astype(float)  # small integers: ties happen
        y = x + g.normal(0, 5, n)
        cases.append(Case(f"n={n}, with ties", (x, y), expected=spearman(x, y)))
    check("spearman", fn, cases)
