"""Do the lesson 02 checks pass a right answer, fail wrong ones, and say 'not attempted' for a stub?"""

from __future__ import annotations

from mlsys_lab.exercises.loops import check_legal_orders, check_misses_per_iteration
from mlsys_lab.loops import legal_orders, misses_per_iteration


def stub(*_args):
    raise NotImplementedError()


def test_legal_orders_check(capsys):
    check_legal_orders(legal_orders)
    check_legal_orders(lambda vectors: [tuple(range(len(vectors[0])))])  # only the original order: wrong
    check_legal_orders(stub)
    right, wrong, todo = capsys.readouterr().out.splitlines()
    assert right.startswith("✓ legal_orders: 15/15")
    assert wrong.startswith("✗ legal_orders: case 1")
    assert todo == "… legal_orders: not attempted yet"


def test_misses_check(capsys):
    check_misses_per_iteration(lambda order, per_line: misses_per_iteration(order, per_line)["total"])
    check_misses_per_iteration(lambda order, per_line: 1.0)
    right, wrong = capsys.readouterr().out.splitlines()
    assert right.startswith("✓ misses_per_iteration: 12/12")
    assert wrong.startswith("✗ misses_per_iteration")
