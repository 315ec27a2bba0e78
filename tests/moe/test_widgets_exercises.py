"""Do the lesson 11 explorer and checks work headless, and do the checks catch wrong answers?"""

import numpy as np

from mlsys_lab.exercises.moe import (
    check_aux_loss,
    check_route_with_capacity,
    reference_aux_loss,
    reference_route,
)
from mlsys_lab.widgets.moe import RoutingExplorer


def test_routing_explorer_shows_overflow_and_errors_in_place():
    ex = RoutingExplorer()
    assert ex.error is None
    ex.set(capacity_factor=3.0, skew=0.0)
    assert ex.readout["dropped (token, expert) pairs"] == "0.0 %"
    ex.set(capacity_factor=0.5)
    assert float(ex.readout["dropped (token, expert) pairs"].rstrip(" %")) >= 50
    ex.set(n_experts=2, top_k=4)
    assert ex.error is not None and "top_k" in ex.error


def _verdict(check, fn, capsys):
    check(fn)
    return capsys.readouterr().out


def test_moe_checks_pass_references_and_catch_mistakes(capsys):
    assert _verdict(check_route_with_capacity, reference_route, capsys).startswith("✓")

    def no_capacity(logits, k, capacity):
        idx = np.argsort(-logits, axis=1)[:, :k]
        return idx, np.ones_like(idx, dtype=bool)

    assert _verdict(check_route_with_capacity, no_capacity, capsys).startswith("✗")
    assert _verdict(check_aux_loss, reference_aux_loss, capsys).startswith("✓")
    assert _verdict(check_aux_loss, lambda lg, k: (1.0, np.zeros_like(lg)), capsys).startswith("✗")

    def todo(*args):
        raise NotImplementedError()

    assert _verdict(check_aux_loss, todo, capsys).startswith("…")
