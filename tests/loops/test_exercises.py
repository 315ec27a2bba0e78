"""Do the lesson 02 checks pass a right answer, fail wrong ones, and say 'not attempted' for a stub?"""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import loops as loops_checks
from mlsys_lab.exercises.loops import (
    MAX_REPEAT,
    SPEED_N,
    SPEEDUP_REQUIRED,
    check_legal_orders,
    check_misses_per_iteration,
    check_transformation_legal,
    cpu_seconds_of,
    speedup_over_naive,
    transformation_answer,
)
from mlsys_lab.loops import legal_orders, misses_per_iteration
from mlsys_lab.loops.matmul import matmul_atb_naive


def stub(*_args):
    raise NotImplementedError()


def test_legal_orders_check(capsys):
    check_legal_orders(legal_orders)
    check_legal_orders(lambda vectors: [tuple(range(len(vectors[0])))])  # only the original order: wrong
    check_legal_orders(stub)
    right, wrong, todo = capsys.readouterr().out.splitlines()
    assert right == "✓ legal_orders: 16/16 cases"
    assert wrong.startswith("✗ legal_orders: case 1")
    assert todo == "… legal_orders: not attempted yet"


def test_misses_check(capsys):
    check_misses_per_iteration(lambda order, per_line: misses_per_iteration(order, per_line)["total"])
    check_misses_per_iteration(lambda order, per_line: 1.0)
    right, wrong = capsys.readouterr().out.splitlines()
    assert right == "✓ misses_per_iteration: 14/14 cases"
    assert wrong.startswith("✗ misses_per_iteration")


def test_transformation_check(capsys):
    check_transformation_legal(transformation_answer)
    check_transformation_legal(lambda vectors, matrix: (True, []))
    check_transformation_legal(stub)
    right, wrong, todo = capsys.readouterr().out.splitlines()
    assert right == "✓ transformation_legal: 17/17 cases"
    assert wrong.startswith("✗ transformation_legal: case 1")
    assert todo == "… transformation_legal: not attempted yet"


def test_the_naive_nest_timed_against_itself_is_not_fast_enough(monkeypatch):
    g = np.random.default_rng(0)
    a, b = g.standard_normal((SPEED_N, SPEED_N)), g.standard_normal((SPEED_N, SPEED_N))
    rounds = []

    def counted(fn, args, repeat):
        rounds.append(repeat)
        return cpu_seconds_of(fn, args, repeat)

    monkeypatch.setattr(loops_checks, "cpu_seconds_of", counted)

    def naive(a, b, out, tile):
        return matmul_atb_naive(a, b, out)

    ratio, last = speedup_over_naive(naive, (a, b, np.empty((SPEED_N, SPEED_N)), 32))
    assert ratio < SPEEDUP_REQUIRED
    assert 3 <= len(rounds) <= 9  # at least three rounds, at most nine
    assert rounds[0] == 1 and all(1 <= r <= MAX_REPEAT for r in rounds)  # the first may compile: one call
    assert np.array_equal(last, matmul_atb_naive(a, b, np.empty((SPEED_N, SPEED_N))))


def test_cpu_seconds_of_times_here_or_asks_the_stand_in():
    """In a lesson, ``repeat`` calls on this process's clock; a grading stand-in answers with its own method."""
    calls = []
    seconds, result = cpu_seconds_of(lambda x: calls.append(x) or len(calls), (7,), 3)
    assert calls == [7, 7, 7] and result == 3 and seconds > 0

    class StandIn:
        def __call__(self, *args):
            raise AssertionError("a timed call must not go through a plain call")

        def cpu_seconds_of(self, args, repeat):
            return 0.5 * repeat, ("from the worker", args)

    assert cpu_seconds_of(StandIn(), (1, 2), 4) == (2.0, ("from the worker", (1, 2)))
