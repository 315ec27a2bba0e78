"""Does the read-stream ceiling count its bytes and take the best run?"""

from __future__ import annotations

import pytest

from mlsys_lab.roofline import ceilings
from mlsys_lab.timing import Timing


def test_read_bandwidth_counts_every_byte_once_and_takes_the_best_run(monkeypatch):
    monkeypatch.setattr(ceilings, "benchmark", lambda fn, **kw: Timing((2e-3, 1e-3, 4e-3), "cpu"))
    # 2 MiB read in the best run of 1 ms: 2 * 2^20 / 1e-3 = 2.097 GB/s
    assert ceilings.read_bandwidth(mib=2, repeat=3) == pytest.approx(2 * 2**20 / 1e-3)


def test_read_bandwidth_measures_something_plausible():
    assert 1e8 < ceilings.read_bandwidth(mib=8, repeat=2) < 1e13


def test_read_bandwidth_rejects_bad_sizes():
    with pytest.raises(ValueError, match="mib"):
        ceilings.read_bandwidth(mib=0)
