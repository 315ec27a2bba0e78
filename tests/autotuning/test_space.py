"""Do the recorded spaces join right, and is ruggedness measured between one-parameter neighbours?"""

from __future__ import annotations

import numpy as np

from mlsys_lab.autotuning import space
from mlsys_lab.autotuning.features import STATIC_FEATURES


def test_neighbour_jumps_by_hand():
    features = np.array([[0, 0], [1, 0], [1, 1]])
    jumps = space.neighbour_jumps(features, np.array([1.0, np.e, np.e]))
    np.testing.assert_allclose(sorted(jumps), [0.0, 1.0])  # (0,1) differ once: |log e| = 1; (1,2): 0


def test_recorded_gpu_space_is_consistent():
    """Do the recorded GPU run and the static features join, with correct results and the device named?"""
    gpu = space.load_gpu_space()
    n = len(gpu["seconds"])
    assert n >= 100 and gpu["raw"].shape == (n, 8)
    assert gpu["static"].shape == (n, len(STATIC_FEATURES))
    assert "H200" in gpu["meta"]["device"] and gpu["meta"]["date"]
    assert np.all(gpu["seconds"] > 0)
    # the FMA count is a function of the configuration: TM * TN * min(UNROLL, BK) at least
    raw = gpu["raw"]
    assert np.all(gpu["static"][:, 4] >= raw[:, 3] * raw[:, 4])


def test_recorded_space_adds_standardized_features():
    gpu = space.recorded_space()
    assert gpu["raw_std"].shape == gpu["raw"].shape and gpu["static_std"].shape == gpu["static"].shape
    np.testing.assert_allclose(gpu["raw_std"].mean(axis=0), 0.0, atol=1e-12)


def test_cpu_tiles_are_timed_for_every_triple():
    cpu = space.measure_cpu_tiles(n=16, tiles=(4, 8), repeat=1, progress=False)
    assert cpu["raw"].shape == (8, 3) and cpu["seconds"].shape == (8,) and (cpu["seconds"] > 0).all()
