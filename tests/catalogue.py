"""Proving a check: the reference passes it on every seed, and every plausible wrong answer fails on every seed.

Each lesson's ``tests/<slug>/test_exercise_catalogue.py`` lists, per exercise, the reference and at least
:data:`MIN_WRONG` wrong implementations a learner could plausibly write (off by one, wrong units, the visible
examples special-cased, a parameter ignored, the naive variant the lesson warns against, an answer that skips
the mechanism), and hands them to :func:`catalogue_tests`:

    CATALOGUES = [Catalogue("classify_bound", check_classify_bound, reference_bound, {
        "ignores the hardware (ridge fixed at 10)": lambda f, b, p, w: ...,
        ...
    })]
    test_reference_passes, test_wrong_fails = catalogue_tests(CATALOGUES)

Both tests run on all of a catalogue's seeds under ``make test-all`` (``pytest --exhaustive``); the quick lane,
``make test``, runs every reference and every wrong implementation on the first few seeds (``tests/lanes.py``).

A check that lets a wrong answer through on some seed decides on cases that do not separate right from
wrong: the fix is in the check's cases (draw the boundary, every dtype, ties), not in the catalogue.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Callable

import pytest

from mlsys_lab.exercises import FAIL, PASS, VERDICT_SINK, Verdict, seeded

SEEDS = range(50)
MIN_WRONG = 5


@dataclass
class Catalogue:
    """One exercise: its check, the reference implementation, and wrong ones by what is wrong with them."""

    name: str  # the exercise, as in check_<name>
    check: Callable[[Callable], None]
    reference: Callable
    wrong: dict[str, Callable] = field(default_factory=dict)
    seeds: range = SEEDS


def verdict(check: Callable[[Callable], None], fn: Callable, seed: int) -> Verdict:
    """The verdict ``check`` gives ``fn`` with the random cases of ``seed`` (its printed line suppressed)."""
    verdicts: list[Verdict] = []
    token = VERDICT_SINK.set(verdicts.append)
    try:
        with seeded(seed), contextlib.redirect_stdout(io.StringIO()):
            check(fn)
    finally:
        VERDICT_SINK.reset(token)
    assert len(verdicts) == 1, f"the check gave {len(verdicts)} verdicts"
    return verdicts[0]


def seeds_where(catalogue: Catalogue, fn: Callable, status: str, seeds: range | None = None) -> list[tuple[int, str]]:
    """(seed, verdict line) for every seed (of ``seeds``, default all the catalogue's) on which the check's verdict
    on ``fn`` is not ``status``."""
    out = []
    for seed in catalogue.seeds if seeds is None else seeds:
        v = verdict(catalogue.check, fn, seed)
        if v.status != status:
            out.append((seed, v.line))
    return out


def catalogue_tests(catalogues: list[Catalogue]) -> tuple[Callable, Callable]:
    """Two parametrized tests: the reference passes every seed; each wrong implementation fails every seed.

    ``catalogue_seeds`` (a fixture of ``tests/lanes.py``): None for all the seeds, or how many of the first to run."""
    by_name = {c.name: c for c in catalogues}
    wrong_ids = [(c.name, label) for c in catalogues for label in c.wrong]

    @pytest.mark.parametrize("name", list(by_name))
    def test_reference_passes_every_seed(name, catalogue_seeds):
        catalogue = by_name[name]
        assert len(catalogue.wrong) >= MIN_WRONG, f"{name}: only {len(catalogue.wrong)} wrong implementations"
        missed = seeds_where(catalogue, catalogue.reference, PASS, catalogue.seeds[:catalogue_seeds])
        assert not missed, (f"{name}: the reference fails on {len(missed)} seeds, "
                            f"e.g. seed {missed[0][0]}: {missed[0][1]}")

    @pytest.mark.parametrize(("name", "label"), wrong_ids, ids=[f"{n}-{w}" for n, w in wrong_ids])
    def test_wrong_fails_every_seed(name, label, catalogue_seeds):
        catalogue = by_name[name]
        seeds = catalogue.seeds[:catalogue_seeds]
        passed = seeds_where(catalogue, catalogue.wrong[label], FAIL, seeds)
        assert not passed, (f"{name}: '{label}' is not rejected on {len(passed)} of {len(seeds)} "
                            f"seeds, e.g. seed {passed[0][0]}: {passed[0][1]}")

    return test_reference_passes_every_seed, test_wrong_fails_every_seed
