"""Checks for the exercises of 05_autotuning.

The searches are graded on the *measurement table*: the check passes in a measuring function that stays on the
grader's side and records every configuration the search asks for. The number of measurements, repeats, which
configurations were visited and whether the one returned is the fastest of them are all read from that record,
never from what the search says about itself.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np

from mlsys_lab.autotuning.search import factorial_grid
from mlsys_lab.autotuning.space import recorded_space
from mlsys_lab.autotuning.stats import spearman, standardize
from mlsys_lab.autotuning.surrogate import gp_posterior
from mlsys_lab.exercises import Case, check, rng

MODEL_INITIAL = 4  # random measurements before the model-guided search consults its model


class RecordingMeasure:
    """Stand-in for compiling and timing a configuration: ``measure(config)`` returns seconds and records the call.

    ``seconds`` is indexed by the configuration: an int for a table (``seconds[i]``), a tuple of value indices
    for a grid over knobs (``seconds[i0, i1, ...]``, ``grid=True``).
    """

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"__call__"})

    def __init__(self, seconds: np.ndarray, grid: bool = False) -> None:
        self.seconds = np.asarray(seconds, dtype=float)
        self.grid = grid
        self.calls: list[Any] = []

    def __call__(self, config) -> float:
        if not self.grid:
            key = int(config)
            if not 0 <= key < len(self.seconds):
                raise IndexError(f"config must be an index in 0..{len(self.seconds) - 1}; got {key}")
        else:
            key = tuple(int(v) for v in config)
            shape = self.seconds.shape
            if len(key) != len(shape) or any(not 0 <= v < s for v, s in zip(key, shape, strict=True)):
                raise IndexError(f"config must be {self.seconds.ndim} value indices below {self.seconds.shape}; "
                                 f"got {key}")
        self.calls.append(key)
        return float(self.seconds[key])


def _fastest_measured(measure: RecordingMeasure, result, as_key) -> str | None:
    """Is ``result`` the fastest config the search measured (the first measured among equals)?"""
    calls = measure.calls
    try:
        key = as_key(result)
    except (TypeError, ValueError):
        return f"returned {result!r}, not a configuration"
    times = [float(measure.seconds[c]) for c in calls]
    best = calls[int(np.argmin(times))]
    if key != best:
        return f"returned {key}, but the fastest config it measured is {best}"
    return None


# --------------------------------------------------------------------------------------------- random search
def _random_case(label: str, seconds: np.ndarray, budget: int, seed: int) -> Case:
    measure = RecordingMeasure(seconds)
    n = len(seconds)
    expected = [int(i) for i in np.random.default_rng(seed).permutation(n)[:min(budget, n)]]

    def verdict(result) -> str | None:
        calls = measure.calls
        if len(calls) > budget:
            return f"measured {len(calls)} configs; the budget is {budget}"
        if len(set(calls)) != len(calls):
            return "measured the same config twice (a wasted measurement)"
        if calls != expected:
            return (f"measured {calls[:6]}{'...' if len(calls) > 6 else ''}; the seeded order "
                    f"default_rng({seed}).permutation({n}) starts {expected[:6]} and the budget allows {len(expected)}")
        return _fastest_measured(measure, result, int)

    return Case(label, (measure, n, budget, seed), check_result=verdict)


def check_random_search(fn) -> None:
    """``fn(measure, n_configs, budget, seed)`` -> index of the fastest of the first ``budget`` configs of
    ``np.random.default_rng(seed).permutation(n_configs)``, each measured once."""
    g = rng()
    cases = [_random_case("10 configs, budget 3, seed 0", np.arange(10, 0, -1.0), 3, 0),
             _random_case("budget larger than the space", np.array([3.0, 1.0, 2.0]), 10, 1),
             _random_case("budget equal to the space", np.array([2.0, 5.0, 1.0, 4.0]), 4, 2),
             _random_case("budget 1", g.lognormal(0, 1, 50), 1, 3),
             _random_case("one config", np.array([1.5]), 5, 4),
             _random_case("ties: the first measured wins", np.array([2.0, 1.0, 1.0, 1.0, 3.0, 1.0]), 6, 5),
             _random_case("fast configs first in the table", np.arange(1, 201, dtype=float), 10, 6)]
    recorded = recorded_space()["seconds"]
    seed = int(g.integers(1000))
    cases.append(_random_case(f"the recorded H200 table ({len(recorded)} configs), budget 30, seed {seed}", recorded,
                              30, seed))
    for _ in range(6):
        n, budget = int(g.integers(2, 400)), int(g.integers(2, 60))
        cases.append(_random_case(f"{n} configs, budget {budget}", g.lognormal(0, 1, n), budget,
                                  int(g.integers(1000))))
    check("random_search", fn, cases, compare=lambda got, expected: True)


# ----------------------------------------------------------------------------------------------- grid search
def _as_config(value) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _grid_case(label: str, seconds: np.ndarray, budget: int) -> Case:
    measure = RecordingMeasure(seconds, grid=True)
    n_values = list(seconds.shape)
    expected = factorial_grid(n_values, budget)

    def verdict(result) -> str | None:
        calls = measure.calls
        if len(set(calls)) != len(calls):
            return "measured the same config twice (a wasted measurement)"
        if len(calls) > budget:
            return f"measured {len(calls)} configs; the budget is {budget}"
        if set(calls) != set(expected):
            missing, extra = sorted(set(expected) - set(calls)), sorted(set(calls) - set(expected))
            return (f"measured {len(calls)} configs, the grid has {len(expected)}"
                    + (f"; missing {missing[:3]}" if missing else "")
                    + (f"; not on the grid {extra[:3]}" if extra else ""))
        best_time = min(float(seconds[c]) for c in calls)
        best = min(c for c in calls if float(seconds[c]) == best_time)  # ties: first in nested-loop order
        try:
            key = _as_config(result)
        except (TypeError, ValueError):
            return f"returned {result!r}, not a tuple of value indices"
        return None if key == best else f"returned {key}, but the fastest grid point is {best}"

    return Case(label, (measure, n_values, budget), check_result=verdict)


def check_grid_search(fn) -> None:
    """``fn(measure, n_values, budget)`` -> the fastest point (a tuple of value indices) of the factorial grid:
    ``g`` cell-centred values per knob (all of a knob's values if it has fewer), ``g`` as large as the budget allows."""
    g = rng()
    cases = [_grid_case("3 knobs of 5 values, budget 27", g.lognormal(0, 1, (5, 5, 5)), 27),
             _grid_case("budget just short of a larger grid", g.lognormal(0, 1, (5, 5, 5)), 63),
             _grid_case("budget covers the whole space", g.lognormal(0, 1, (3, 2, 4)), 24),
             _grid_case("budget 1: the middle of every knob", g.lognormal(0, 1, (4, 5, 3)), 1),
             _grid_case("binary knobs cap at 2 values", g.lognormal(0, 1, (6, 2, 2, 6)), 40),
             _grid_case("one knob", g.lognormal(0, 1, (9,)), 4),
             _grid_case("a knob with a single value", g.lognormal(0, 1, (1, 7, 4)), 10),
             _grid_case("ties: the first in nested-loop order", np.ones((4, 4)), 9)]
    for _ in range(6):
        shape = tuple(int(s) for s in g.integers(1, 8, int(g.integers(1, 5))))
        budget = int(g.integers(1, max(2, int(np.prod(shape)) + 3)))
        cases.append(_grid_case(f"knobs of {shape} values, budget {budget}", g.lognormal(0, 1, shape), budget))
    check("grid_search", fn, cases, compare=lambda got, expected: True)


# -------------------------------------------------------------------------------------- model-guided search
def lcb_choice_problem(features: np.ndarray, seconds: np.ndarray, measured: list[int], chosen: int) -> str | None:
    """Is ``chosen`` the unmeasured config with the lowest GP lower confidence bound (mean - std of log time)
    given the ``measured`` ones? Near-ties (1e-7) are accepted: the learner's arithmetic may differ in order."""
    mean, std = gp_posterior(features[measured], np.log(seconds[measured]), features)
    score = mean - std
    score[measured] = np.inf
    best = int(np.argmin(score))
    if chosen in measured:
        return f"measured config {chosen} again"
    if score[chosen] > score[best] + 1e-7 * (1 + abs(score[best])):
        return (f"after {len(measured)} measurements it measured {chosen} (mean - std = {score[chosen]:.4f}); "
                f"the model's lowest mean - std is config {best} ({score[best]:.4f})")
    return None


def _model_case(label: str, features: np.ndarray, seconds: np.ndarray, budget: int, seed: int) -> Case:
    measure = RecordingMeasure(seconds)
    n = len(seconds)
    initial = min(MODEL_INITIAL, budget, n)
    first = [int(i) for i in np.random.default_rng(seed).permutation(n)[:initial]]

    def verdict(result) -> str | None:
        calls = measure.calls
        if len(set(calls)) != len(calls):
            return "measured the same config twice (a wasted measurement)"
        if len(calls) != min(budget, n):
            return f"measured {len(calls)} configs; the budget is {budget} (of {n} configs)"
        if sorted(calls[:initial]) != sorted(first):
            return (f"the first {initial} measurements were {calls[:initial]}, not "
                    f"default_rng({seed}).permutation({n})[:{initial}] = {first}")
        for t in range(initial, len(calls)):
            problem = lcb_choice_problem(features, seconds, calls[:t], calls[t])
            if problem:
                return problem
        return _fastest_measured(measure, result, int)

    return Case(label, (measure, features, budget, seed), check_result=verdict)


def _bowl(g, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """A random smooth landscape: configs on a lattice, log time a bowl plus a little noise."""
    raw = g.integers(0, 8, (n, d)).astype(float)
    centre = g.uniform(0, 7, d)
    seconds = np.exp(0.1 * ((raw - centre) ** 2).sum(1) + g.normal(0, 0.05, n))
    return standardize(raw), seconds


def check_model_guided_search(fn) -> None:
    """``fn(measure, features, budget, seed)`` -> index of the fastest config measured: 4 seeded random
    measurements, then each next one the unmeasured config with the lowest GP mean - std of log seconds."""
    g = rng()
    grid = np.array(list(itertools.product(range(6), range(6))), dtype=float)
    cases = [_model_case("6 x 6 bowl, budget 12, seed 0", standardize(grid),
                         np.exp(0.2 * ((grid - [4, 1]) ** 2).sum(1)), 12, 0),
             _model_case("budget below the random start", *_bowl(g, 30, 2), 3, 1),
             _model_case("budget larger than the space", *_bowl(g, 9, 2), 20, 2),
             _model_case("one feature", *_bowl(g, 40, 1), 10, 3)]
    space, seed = recorded_space(), int(g.integers(1000))
    cases.append(_model_case(f"the recorded H200 table ({len(space['seconds'])} configs, raw features), budget 10, "
                             f"seed {seed}", space["raw_std"], space["seconds"], 10, seed))
    for _ in range(3):
        n, d, budget = int(g.integers(20, 100)), int(g.integers(1, 5)), int(g.integers(7, 12))
        cases.append(_model_case(f"{n} configs, {d} features, budget {budget}", *_bowl(g, n, d), budget,
                                 int(g.integers(1000))))
    check("model_guided_search", fn, cases, compare=lambda got, expected: True)


# ------------------------------------------------------------------------------------------------- spearman
def check_spearman(fn) -> None:
    """``fn(x, y)`` -> Spearman rank correlation (ties take their average rank)."""
    tie_x, tie_y = np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])
    cases = [Case("same order", (np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])), expected=1.0),
             Case("reversed", (np.array([1.0, 2, 3]), np.array([3.0, 2, 1])), expected=-1.0),
             Case("example with a tie", (tie_x, tie_y), expected=spearman(tie_x, tie_y)),
             Case("a tie in y only", (tie_y, tie_x), expected=spearman(tie_y, tie_x)),
             Case("two points", (np.array([5.0, -1.0]), np.array([0.0, 2.0])), expected=-1.0),
             Case("unsorted, no ties", (np.array([3.0, 1, 4, 1.5, 9, 2.6]), np.array([2.0, 7, 1, 8, 2.5, 3])),
                  expected=spearman(np.array([3.0, 1, 4, 1.5, 9, 2.6]), np.array([2.0, 7, 1, 8, 2.5, 3])))]
    g = rng()
    for i in range(9):
        n = int(g.integers(3, 120))
        x = g.integers(0, 20, n).astype(float)  # small integers: ties happen
        y = x + g.normal(0, 5, n)
        where = ("x", "y", "x and y")[i % 3]  # ties in one input only, either one, or in both
        if where != "x":
            x, y = (y, x) if where == "y" else (x, np.round(y / 3))
        cases.append(Case(f"n={n}, with ties in {where}", (x, y), expected=spearman(x, y)))
    for _ in range(2):
        n = int(g.integers(5, 60))
        x, y = g.permutation(n).astype(float) - n / 2, g.normal(0, 1, n)
        cases.append(Case(f"n={n}, shuffled, no ties", (x, y), expected=spearman(x, y)))
    check("spearman", fn, cases)
