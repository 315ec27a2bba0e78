"""Does Little's law give the worked examples, and do the recorded sweeps follow it?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import records
from mlsys_lab.roofline import littles_law


def test_littles_law_worked_examples():
    # 4.8 TB/s at 600 ns of latency: 2.88 MB must be in flight, about 21.8 KB per SM of 132.
    assert littles_law.inflight_required(4.8e12, 600e-9) == pytest.approx(2.88e6)
    # 128 FP32 FMA lanes per SM per cycle, 4 cycles of latency: 512 FMAs in flight (16 warps x 1 chain).
    assert littles_law.inflight_required(128, 4) == 512
    np.testing.assert_allclose(
        littles_law.throughput_with_inflight([1e5, 1e6, 1e7], 1e-6, 4.8e12), [1e11, 1e12, 4.8e12]
    )


def test_recorded_sweeps_stay_under_their_peak():
    sweeps = littles_law.littles_law_sweeps(records.load("roofline_h200"))
    assert [s.label for s in sweeps] == ["HBM loads", "FP32 FMA", "tensor-core mma.sync"]
    for sweep in sweeps:
        assert sweep.latency > 0 and sweep.peak > 0
        assert (sweep.throughput <= sweep.peak * 1.05).all()
        assert sweep.predicted.shape == sweep.inflight.shape and (sweep.predicted <= sweep.peak).all()
