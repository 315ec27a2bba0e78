"""Are lesson 05's checks proven? The reference passes every seed; each plausible wrong search fails every seed."""

from __future__ import annotations

import itertools

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.autotuning.surrogate import gp_posterior
from mlsys_lab.exercises.autotuning import (
    check_grid_search,
    check_model_guided_search,
    check_random_search,
    check_spearman,
)


# ------------------------------------------------------------------------------------------- random search
def random_reference(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).permutation(n_configs)[:budget]
    times = [measure(int(i)) for i in picked]
    return int(picked[int(np.argmin(times))])


def random_first_k(measure, n_configs, budget, seed):
    times = [measure(i) for i in range(min(budget, n_configs))]  # "random" = the first k of the table
    return int(np.argmin(times))


def random_with_replacement(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).integers(0, n_configs, budget)
    times = [measure(int(i)) for i in picked]
    return int(picked[int(np.argmin(times))])


def random_seed_ignored(measure, n_configs, budget, seed):
    return random_reference(measure, n_configs, budget, 0)


def random_position_not_index(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).permutation(n_configs)[:budget]
    return int(np.argmin([measure(int(i)) for i in picked]))  # position in the sample, not the config


def random_choice_sampler(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).choice(n_configs, min(budget, n_configs), replace=False)
    times = [measure(int(i)) for i in picked]
    return int(picked[int(np.argmin(times))])


def random_one_short(measure, n_configs, budget, seed):
    return random_reference(measure, n_configs, max(budget - 1, 1), seed)


def random_last_wins_ties(measure, n_configs, budget, seed):
    picked = np.random.default_rng(seed).permutation(n_configs)[:budget]
    times = np.array([measure(int(i)) for i in picked])
    return int(picked[len(times) - 1 - int(np.argmin(times[::-1]))])


# --------------------------------------------------------------------------------------------- grid search
def grid_axes(n_values, g):
    return [[(2 * t + 1) * size // (2 * min(size, g)) for t in range(min(size, g))] for size in n_values]


def grid_points_per_knob(n_values, budget):
    g = 1
    while g < max(n_values) and np.prod([min(s, g + 1) for s in n_values]) <= budget:
        g += 1
    return g


def grid_reference(measure, n_values, budget):
    points = list(itertools.product(*grid_axes(n_values, grid_points_per_knob(n_values, budget))))
    times = [measure(p) for p in points]
    return points[int(np.argmin(times))]


def grid_root_of_budget(measure, n_values, budget):
    g = max(1, int(round(budget ** (1 / len(n_values)))))  # g from budget**(1/d), caps ignored
    while np.prod([min(s, g) for s in n_values]) > budget:
        g -= 1
    points = list(itertools.product(*grid_axes(n_values, g)))
    return points[int(np.argmin([measure(p) for p in points]))]


def grid_linspace_endpoints(measure, n_values, budget):
    g = grid_points_per_knob(n_values, budget)
    axes = [sorted(set(np.round(np.linspace(0, s - 1, min(s, g))).astype(int).tolist())) for s in n_values]
    points = list(itertools.product(*axes))
    return points[int(np.argmin([measure(p) for p in points]))]


def grid_first_values(measure, n_values, budget):
    g = grid_points_per_knob(n_values, budget)
    points = list(itertools.product(*[range(min(s, g)) for s in n_values]))  # the first g values, not spread
    return points[int(np.argmin([measure(p) for p in points]))]


def grid_one_too_many(measure, n_values, budget):
    g = min(grid_points_per_knob(n_values, budget) + 1, max(n_values))  # overshoots the budget
    points = list(itertools.product(*grid_axes(n_values, g)))
    return points[int(np.argmin([measure(p) for p in points]))]


def grid_random_sample(measure, n_values, budget):
    every = list(itertools.product(*[range(s) for s in n_values]))
    picked = np.random.default_rng(0).permutation(len(every))[:budget]
    points = [every[i] for i in picked]
    return points[int(np.argmin([measure(p) for p in points]))]


def grid_last_wins_ties(measure, n_values, budget):
    points = list(itertools.product(*grid_axes(n_values, grid_points_per_knob(n_values, budget))))
    times = np.array([measure(p) for p in points])
    return points[len(times) - 1 - int(np.argmin(times[::-1]))]


# ------------------------------------------------------------------------------------- model-guided search
def model_search(measure, features, budget, seed, *, initial=4, kappa=1.0, log=True, exclude=True,
                 refit=True, rng_order=True):
    n = len(features)
    budget = min(budget, n)
    order = np.random.default_rng(seed).permutation(n) if rng_order else np.arange(n)
    measured = [int(i) for i in order[:min(initial, budget)]]
    times = [measure(i) for i in measured]
    fitted = None
    while len(measured) < budget:
        if refit or fitted is None:
            target = np.log(times) if log else np.asarray(times)
            fitted = gp_posterior(features[measured], target, features)
        mean, std = fitted
        score = mean - kappa * std
        if exclude:
            score[measured] = np.inf
        nxt = int(np.argmin(score))
        measured.append(nxt)
        times.append(measure(nxt))
    return measured[int(np.argmin(times))]


def model_reference(measure, features, budget, seed):
    return model_search(measure, features, budget, seed)


# --------------------------------------------------------------------------------------------------- spearman
def ranks_average(values):
    values = np.asarray(values, dtype=float)
    out = np.empty(len(values))
    out[np.argsort(values, kind="mergesort")] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        out[values == v] = out[values == v].mean()
    return out


def spearman_reference(x, y):
    return float(np.corrcoef(ranks_average(x), ranks_average(y))[0, 1])


def spearman_ordinal_ties(x, y):
    def ranks(v):
        out = np.empty(len(v))
        out[np.argsort(v, kind="mergesort")] = np.arange(1, len(v) + 1)
        return out
    return float(np.corrcoef(ranks(np.asarray(x)), ranks(np.asarray(y)))[0, 1])


def spearman_min_rank_ties(x, y):
    def ranks(v):
        v = np.asarray(v, dtype=float)
        return np.array([1 + np.sum(v < e) for e in v], dtype=float)  # competition ranking: ties take the lowest
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def spearman_ties_in_x_only(x, y):
    """Average ranks for x, ordinal ranks for y: right whenever y has no ties (the old cases never tied y)."""
    return float(np.corrcoef(ranks_average(x), spearman_ordinal_ranks(y))[0, 1])


def spearman_ties_in_y_only(x, y):
    return float(np.corrcoef(spearman_ordinal_ranks(x), ranks_average(y))[0, 1])


def spearman_ordinal_ranks(v):
    out = np.empty(len(v))
    out[np.argsort(np.asarray(v, dtype=float), kind="mergesort")] = np.arange(1, len(v) + 1)
    return out


def spearman_difference_formula(x, y):
    d = ranks_average(x) - ranks_average(y)
    n = len(d)
    return float(1 - 6 * np.sum(d**2) / (n * (n**2 - 1)))  # exact only without ties


EXAMPLE_ANSWERS = {(1.0, 2.0, 3.0, 4.0): 1.0, (1.0, 2.0, 3.0): -1.0}


def spearman_examples_then_pearson(x, y):
    return EXAMPLE_ANSWERS.get(tuple(np.asarray(x, dtype=float).tolist()), float(np.corrcoef(x, y)[0, 1]))


CATALOGUES = [
    Catalogue("random_search", check_random_search, random_reference, {
        "measures the first k configs of the table": random_first_k,
        "draws with replacement (repeats)": random_with_replacement,
        "ignores the seed": random_seed_ignored,
        "returns the position in the sample, not the config": random_position_not_index,
        "samples with rng.choice, not the seeded permutation": random_choice_sampler,
        "one measurement short of the budget": random_one_short,
        "ties go to the last measured": random_last_wins_ties,
    }),
    Catalogue("grid_search", check_grid_search, grid_reference, {
        "points per knob from budget**(1/d), binary knobs not capped": grid_root_of_budget,
        "linspace end points instead of cell centres": grid_linspace_endpoints,
        "the first g values of each knob": grid_first_values,
        "one point per knob too many (over budget)": grid_one_too_many,
        "a random sample of the space": grid_random_sample,
        "ties go to the last grid point": grid_last_wins_ties,
    }),
    Catalogue("model_guided_search", check_model_guided_search, model_reference, {
        "pure random search": lambda m, f, b, s: model_search(m, f, b, s, initial=b),
        "mean only, no exploration term": lambda m, f, b, s: model_search(m, f, b, s, kappa=0.0),
        "mean + std (pessimistic)": lambda m, f, b, s: model_search(m, f, b, s, kappa=-1.0),
        "models seconds, not log seconds": lambda m, f, b, s: model_search(m, f, b, s, log=False),
        "never refits after the random start": lambda m, f, b, s: model_search(m, f, b, s, refit=False),
        "starts from configs 0..3, not the seeded ones": lambda m, f, b, s: model_search(m, f, b, s, rng_order=False),
        "does not exclude measured configs": lambda m, f, b, s: model_search(m, f, b, s, exclude=False),
    }),
    Catalogue("spearman", check_spearman, spearman_reference, {
        "Pearson on the values": lambda x, y: float(np.corrcoef(x, y)[0, 1]),
        "ties get ordinal ranks": spearman_ordinal_ties,
        "average ranks for ties in x only": spearman_ties_in_x_only,
        "average ranks for ties in y only": spearman_ties_in_y_only,
        "argsort taken as the ranks": lambda x, y: float(np.corrcoef(np.argsort(x), np.argsort(y))[0, 1]),
        "ties get the lowest rank": spearman_min_rank_ties,
        "1 - 6 sum d^2 / (n (n^2 - 1)) with ties": spearman_difference_formula,
        "the visible examples, then Pearson": spearman_examples_then_pearson,
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)


# ------------------------------------------------------------------------------------- what the verdicts say
def measures_everything(measure, n_configs, budget, seed):
    times = [measure(i) for i in range(n_configs)]  # over budget
    return int(np.argmin(times))


def stub(*_args):
    raise NotImplementedError()


def test_random_search_verdicts(capsys):
    """Does the check pass the reference, name an overrun and the unseeded order, and say 'not attempted'?"""
    for fn in (random_reference, measures_everything, random_first_k, stub):
        check_random_search(fn)
    right, overrun, first, todo = capsys.readouterr().out.splitlines()
    assert right == "✓ random_search: 14/14 cases"
    assert "budget is 3" in overrun and overrun.startswith("✗")
    assert "seeded order" in first and first.startswith("✗ random_search: case 1")
    assert todo == "… random_search: not attempted yet"


def test_grid_and_model_checks_reject_a_random_sample(capsys):
    """Does a random sample fail the grid check, and a random search the model-guided one, naming why?"""
    def random_grid(measure, n_values, budget):
        configs = [tuple(int(v) for v in np.random.default_rng(0).integers(0, n_values)) for _ in range(budget)]
        return min(configs, key=measure)

    check_grid_search(random_grid)
    check_model_guided_search(lambda measure, features, budget, seed: random_reference(measure, len(features), budget,
                                                                                       seed))
    grid, model = capsys.readouterr().out.splitlines()
    assert grid.startswith("✗ grid_search: case 1")
    assert model.startswith("✗ model_guided_search: case 1") and "mean - std" in model
