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


def test_loaded_latency_by_hand():
    # best 4e12; 90% = 3.6e12 first reached (fewest in flight) at 4 MB, 3.8e12 B/s: t = 1.0526 us
    assert littles_law.loaded_latency([8e6, 1e6, 4e6], [4e12, 1.5e12, 3.8e12], 0.9) == pytest.approx(4e6 / 3.8e12)
    # fraction 1: the best point itself
    assert littles_law.loaded_latency([8e6, 1e6, 4e6], [4e12, 1.5e12, 3.8e12], 1.0) == pytest.approx(2e-6)
    with pytest.raises(ValueError, match="fraction"):
        littles_law.loaded_latency([1.0], [1.0], 0)
    with pytest.raises(ValueError, match="same length"):
        littles_law.loaded_latency([1.0, 2.0], [1.0], 0.9)


def test_the_recorded_hbm_sweep_is_loaded_about_three_times_the_idle_latency():
    data = records.load("roofline_h200")
    hbm = littles_law.littles_law_sweeps(data)[0]
    loaded = littles_law.loaded_latency(hbm.inflight, hbm.throughput, 0.95)
    # the knee: 2 loads x 512 blocks x 256 threads x 16 B = 4 MiB in flight at 3.68 TB/s -> 1.14 us
    assert loaded == pytest.approx(4194304 / 3.684e12, rel=2e-3)
    assert 2.5 < loaded / data["littles_law"]["chase_hbm"]["latency_s"] < 4
