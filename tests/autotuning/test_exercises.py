"""Do the lesson 05 checks pass a right answer and catch budget overruns, repeats and wrong answers?"""

from __future__ import annotations

import numpy as np

from mlsys_lab.autotuning.stats import spearman
from mlsys_lab.exercises.autotuning import check_random_search, check_spearman


def good_search(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).permutation(n_configs)[:budget]
    times = [measure(i) for i in picked]
    return int(picked[int(np.argmin(times))])


def greedy_overrun(measure, n_configs, budget, seed):
    times = [measure(i) for i in range(n_configs)]  # measures everything: over budget
    return int(np.argmin(times))


def repeats(measure, n_configs, budget, seed):
    for _ in range(budget):
        measure(0)
    return 0


def test_random_search_check(capsys):
    for fn in (good_search, greedy_overrun, repeats):
        check_random_search(fn)
    right, overrun, repeated = capsys.readouterr().out.splitlines()
    assert right == "✓ random_search: 10/10 cases"
    assert "budget" in overrun and overrun.startswith("✗")
    assert "twice" in repeated or "measured only" in repeated


def test_spearman_check(capsys):
    check_spearman(spearman)
    check_spearman(lambda x, y: float(np.corrcoef(x, y)[0, 1]))  # Pearson is not Spearman
    right, wrong = capsys.readouterr().out.splitlines()
    assert right == "✓ spearman: 12/12 cases"
    assert wrong.startswith("✗ spearman")
