"""Do the lesson 05 check helpers and the spearman check behave? (The searches' verdict lines are tested beside
their catalogue, in test_exercise_catalogue.py, with the one reference random search.)"""

from __future__ import annotations

import numpy as np

from mlsys_lab.autotuning.stats import spearman
from mlsys_lab.exercises.autotuning import RecordingMeasure, check_spearman, lcb_choice_problem


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
    assert right == "✓ spearman: 17/17 cases"
    assert wrong.startswith("✗ spearman")
