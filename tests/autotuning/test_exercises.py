"""Do the lesson 05 checks pass a right answer, name what a wrong one did, and say 'not attempted' for a stub?"""

from __future__ import annotations

import numpy as np

from mlsys_lab.autotuning.stats import spearman
from mlsys_lab.exercises.autotuning import (
    RecordingMeasure,
    check_grid_search,
    check_model_guided_search,
    check_random_search,
    check_spearman,
    lcb_choice_problem,
)


def good_search(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).permutation(n_configs)[:budget]
    times = [measure(int(i)) for i in picked]
    return int(picked[int(np.argmin(times))])


def greedy_overrun(measure, n_configs, budget, seed):
    times = [measure(i) for i in range(n_configs)]  # measures everything: over budget
    return int(np.argmin(times))


def first_k(measure, n_configs, budget, seed):
    times = [measure(i) for i in range(min(budget, n_configs))]
    return int(np.argmin(times))


def stub(*_args):
    raise NotImplementedError()


def test_random_search_check(capsys):
    for fn in (good_search, greedy_overrun, first_k, stub):
        check_random_search(fn)
    right, overrun, first, todo = capsys.readouterr().out.splitlines()
    assert right == "✓ random_search: 13/13 cases"
    assert "budget is 3" in overrun and overrun.startswith("✗")
    assert "seeded order" in first and first.startswith("✗ random_search: case 1")
    assert todo == "… random_search: not attempted yet"


def test_recording_measure_counts_calls_and_refuses_unknown_configs():
    measure = RecordingMeasure(np.ones((2, 3)), grid=True)
    assert measure((1, 2)) == 1.0 and measure.calls == [(1, 2)]
    for bad in ((2, 0), (0,), (0, -1)):
        try:
            measure(bad)
        except IndexError as exc:
            assert "value indices" in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_grid_and_model_checks_reject_a_random_sample(capsys):
    def random_grid(measure, n_values, budget):
        configs = [tuple(int(v) for v in np.random.default_rng(0).integers(0, n_values)) for _ in range(budget)]
        return min(configs, key=measure)

    check_grid_search(random_grid)
    check_model_guided_search(lambda measure, features, budget, seed: good_search(measure, len(features), budget, seed))
    grid, model = capsys.readouterr().out.splitlines()
    assert grid.startswith("✗ grid_search: case 1")
    assert model.startswith("✗ model_guided_search: case 1") and "mean - std" in model


def test_lcb_choice_accepts_the_lowest_bound_only():
    features = np.linspace(-1, 1, 9)[:, None]
    seconds = np.exp((features[:, 0] - 0.3) ** 2)
    measured = [0, 8, 4]
    scores = [lcb_choice_problem(features, seconds, measured, c) for c in range(9) if c not in measured]
    assert sum(problem is None for problem in scores) == 1
    assert "again" in lcb_choice_problem(features, seconds, measured, 4)


def test_spearman_check(capsys):
    check_spearman(spearman)
    check_spearman(lambda x, y: float(np.corrcoef(x, y)[0, 1]))  # Pearson is not Spearman
    right, wrong = capsys.readouterr().out.splitlines()
    assert right == "✓ spearman: 15/15 cases"
    assert wrong.startswith("✗ spearman")
