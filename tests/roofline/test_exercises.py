"""Do the lesson 03 checks accept the reference and catch wrong answers?"""

from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

from mlsys_lab.exercises import roofline as ex


def verdict(check, fn) -> str:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        check(fn)
    return buffer.getvalue().strip()


def test_checks_accept_the_reference_and_reject_wrong_answers():
    assert verdict(ex.check_classify_bound, ex.reference_bound).startswith("✓")
    assert verdict(ex.check_classify_bound, lambda *a: "memory").startswith("✗")
    assert verdict(ex.check_compute_bound_batch, ex.reference_compute_bound_batch).startswith("✓")
    off_by_one = lambda *a: (ex.reference_compute_bound_batch(*a) or 0) + 1  # noqa: E731
    assert verdict(ex.check_compute_bound_batch, off_by_one).startswith("✗")
    assert verdict(ex.check_loads_in_flight, ex.reference_loads_in_flight).startswith("✓")
    floor = lambda bw, t, sms, th, b: math.floor(bw * t / (sms * th * b))  # noqa: E731
    assert verdict(ex.check_loads_in_flight, floor).startswith("✗")

    def todo(*args):
        raise NotImplementedError()

    assert verdict(ex.check_classify_bound, todo) == "… classify_bound: not attempted yet"


def test_compute_bound_batch_by_hand():
    # d = 8192, bf16, ridge 206.15: b >= 206.15 * 2 * 8192 / (2 * (8192 - 412.3)) = 217.1 -> 218
    assert ex.reference_compute_bound_batch(8192, 989.5e12, 4.8e12, 2) == 218
    assert ex.reference_compute_bound_batch(128, 989.5e12, 4.8e12, 2) is None
