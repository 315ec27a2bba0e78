"""Do the roofline formulas reject infinite roofs and non-numbers by name (issue #19)?"""

import math

import numpy as np
import pytest

from mlsys_lab.roofline import ceilings, littles_law, model


@pytest.mark.parametrize("call, text", [
    (lambda: model.ridge_point(math.inf, 1e12), r"peak_flops must be a finite number"),
    (lambda: model.attainable_flops("ab", 1e12, 1e11), r"intensity must be an array of numbers"),
    (lambda: model.roofline_curve(1e12, 1e11, points=10**30), r"points must be an integer between 2 and"),
    (lambda: model.roofline_curve(1e12, 1e11, low=8.0, high=4.0), r"high must be > low"),
    (lambda: model.place(0, 0), r"hardware must be a Hardware"),
    (lambda: littles_law.inflight_required(math.inf, 1e-6), r"throughput must be a finite number"),
    (lambda: littles_law.throughput_with_inflight(-1.0, 1.0, 2.0), r"inflight must be >= 0"),
    (lambda: littles_law.LittleSweep("hbm", np.ones(3), np.ones(4), 1.0, 2.0, "B/s"), r"throughput must have"),
    (lambda: ceilings.read_bandwidth(mib=10**30), r"mib must be an integer between 1 and 4096"),
    (lambda: ceilings.read_bandwidth(mib=1, repeat=10**30), r"repeat must be an integer between 1 and 1000"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_an_array_of_inflight_still_gives_an_array():
    np.testing.assert_allclose(littles_law.throughput_with_inflight(np.array([1.0, 4.0]), 2.0, 1.0), [0.5, 1.0])
