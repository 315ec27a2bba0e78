"""Proving a CUDA kernel check: the lesson's solution passes, wrong kernels fail, slow correct ones miss the floor.

A CUDA exercise's catalogue (``tests/<slug>/test_cuda_exercise_catalogue.py``) lists launchers built from kernel
sources: the notebook's solution, at least :data:`catalogue.MIN_WRONG` wrong kernels (each must be rejected on
every seed: a race without ``__syncthreads()``, a bound off by one, a wrong stride, a dropped tail, a grid that
covers only multiples of the block...) and, in ``SLOW``, correct kernels that must pass and yet miss the
exercise's performance floor (uncoalesced, bank-conflicted, a single block). They run only where a CUDA GPU
answers; elsewhere they are skipped with the reason. On the GPU each catalogue runs on :data:`GPU_SEEDS` seeds
(the quick lane on the first ``QUICK_SEEDS`` of them): a seed costs a compile-free second or two, not the
milliseconds of a CPU check, and a wrong kernel fails on its first wrong case.

No wrong kernel here reads or writes outside its arrays or misaligned: an illegal or misaligned address would end
the CUDA context of the whole test process (that failure is graded in a worker, tests/course/test_grade_cuda.py),
so a launcher that meets one stops the session, naming the kernel, instead of letting every later test fail.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from catalogue import Catalogue, verdict

from mlsys_lab import backend
from mlsys_lab.exercises import PASS

GPU_SEEDS = range(50)  # the standard of every catalogue; the quick lane runs the first 5
needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason=f"the CUDA exercises need a CUDA GPU ({backend.describe()})")


_launched = ["nothing"]  # the last catalogue kernel launched: the one to name when the context is found lost


def launcher(source: str, name: str, launch: Callable) -> Callable:
    """A learner's launcher: ``launch(kernel, *args)`` with ``kernel`` compiled from ``source`` on first use."""
    from mlsys_lab.kernels.learner import compile_learner_kernel

    def fn(*args):
        try:
            result = launch(compile_learner_kernel(source, name), *args)
        except Exception as exc:  # a faulting kernel ends the GPU context: every later test would fail for it
            if backend.context_lost(f"{type(exc).__name__}: {exc}"):
                pytest.exit(f"the GPU context was lost before launching {name}: a kernel launched before it "
                            f"({_launched[0]}, or the check's own) faulted ({exc}); a catalogue kernel must stay "
                            "inside its arrays and aligned", returncode=3)
            raise
        _launched[0] = name
        return result

    fn.__name__ = name
    return fn


def variant(source: str, *edits: tuple[str, str]) -> str:
    """``source`` with each ``(old, new)`` replaced once; an ``old`` that is not there is the catalogue's bug."""
    for old, new in edits:
        assert old in source, f"the edit's text is not in the source: {old!r}"
        source = source.replace(old, new, 1)
    return source


def floor_tests(catalogues: list[Catalogue], slow: dict[str, dict[str, Callable]]) -> tuple[Callable, Callable]:
    """Two tests: the solution meets the floor, and each slow kernel passes the check but misses it, on every seed."""
    ids = [(name, label) for name, kernels in slow.items() for label in kernels]
    by_name = {c.name: c for c in catalogues}

    @needs_gpu
    @pytest.mark.parametrize(("name", "label"), ids, ids=[f"{n}-{w}" for n, w in ids])
    def test_slow_correct_kernel_passes_but_misses_the_floor(name, label, catalogue_seeds):
        catalogue = by_name[name]
        seeds = catalogue.seeds[:catalogue_seeds]
        wrong = []
        for seed in seeds:
            v = verdict(catalogue.check, slow[name][label], seed)
            if v.status != PASS or "below the floor" not in v.figure or v.floor_met is not False:
                wrong.append(f"seed {seed}: {v.line} · {v.figure}")
        assert not wrong, f"{name}: '{label}':\n" + "\n".join(wrong)

    @needs_gpu
    @pytest.mark.parametrize("name", list(by_name))
    def test_solution_meets_the_floor(name, catalogue_seeds):
        catalogue = by_name[name]
        verdicts = [verdict(catalogue.check, catalogue.reference, seed) for seed in catalogue.seeds[:catalogue_seeds]]
        figures = [v.figure for v in verdicts]
        assert all("floor of" in f and f.endswith("met") for f in figures), "\n".join(figures)
        assert all(v.floor_met is True for v in verdicts), "the speed point is not given: " + "\n".join(figures)

    return test_solution_meets_the_floor, test_slow_correct_kernel_passes_but_misses_the_floor


TIMED_ELEMENTS = 2**24  # a check's cases stay below this; its timed case (2^25 elements) does not


def unwritten(shape: tuple) -> object:
    """The output array a catalogue launcher hands its kernel: NaN everywhere for a case, so that an element the
    kernel skips is wrong whatever the memory pool's block held before (in one process, a block freed by an earlier
    run on the same seed holds the right answer; a learner's ``xp.empty`` in a graded worker never meets such a
    block). The timed case's output is left unfilled, as a learner's is, so that its time is the kernel's alone."""
    from mlsys_lab.backend import xp

    if int(np.prod(shape)) >= TIMED_ELEMENTS:
        return xp.empty(shape, dtype=xp.float32)
    return xp.full(shape, np.nan, dtype=xp.float32)


def grid_for(n: int, threads: int, cap: int) -> int:
    """Blocks of ``threads`` covering ``n`` items, at most ``cap`` (a grid-stride loop does the rest)."""
    return max(1, min(-(-n // threads), cap))
