"""Does the skewed, blocked DP give exactly the serial answer?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import wavefront


def test_wavefront_matches_serial_dp():
    """Does the skewed, blocked, parallel DP give exactly the serial answer, for ragged block sizes?"""
    cost = np.random.default_rng().random((37, 53))
    expected = wavefront.min_path_serial(cost)
    assert expected[0, 2] == pytest.approx(cost[0, :3].sum())
    for block in (1, 5, 64):
        np.testing.assert_array_equal(wavefront.min_path_wavefront(cost, block), expected)
    assert wavefront.wavefront_count(3, 2).tolist() == [1, 2, 2, 1]
