"""Do the measurement helpers time the right work, and read the recorded ladders as FLOP/s?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import records
from mlsys_lab.loops import measure


def test_compare_checks_equality_and_reports_a_speed_up():
    x = np.arange(1000.0)
    result = measure.compare("sum", lambda: x.sum(), lambda: np.add.reduce(x), repeat=2)
    assert result.speedup == pytest.approx(result.before_s / result.after_s) and "speed-up" in str(result)
    with pytest.raises(ValueError, match="disagree"):
        measure.compare("wrong", lambda: x.sum(), lambda: x.sum() + 1, repeat=1)


def test_blocked_sweep_pairs_each_configuration_with_its_simulated_misses():
    sweep = measure.blocked_sweep(16, repeat=1)
    n_points = 3 * 6  # ijk, ikj, jki x six tiles
    assert all(len(sweep[key]) == n_points for key in ("order", "tile", "misses", "seconds"))
    assert sweep["tile"].max() == 16 and (sweep["seconds"] > 0).all()
    assert measure.measure_blocked(16, "ikj", 4, repeat=1) > 0


def test_recorded_ladders_by_hand():
    """A step of 2 n³ FLOP in s seconds runs at 2 n³ / s: check two steps against the recorded seconds."""
    cpu = records.load("loops_cpu")
    rates = measure.cpu_ladder_rates(cpu)
    n = cpu["matmul_n"]
    assert rates["ikj"] == pytest.approx(2 * n**3 / cpu["seconds"]["ikj"])
    assert rates["ijk (n=512)"] == pytest.approx(2 * 512**3 / cpu["seconds"]["ijk_512"])
    fastest = measure.cpu_ladder_rates(cpu, "min_seconds")
    assert all(fastest[label] >= rates[label] for label in rates)
    seconds = {"microkernel_8x16": 2.0, "microkernel_4x8": 3.0}
    assert measure.best_microkernel_seconds(seconds) == 2.0
    gpu = measure.gpu_ladder_rates(records.load("loops_gpu"))
    assert list(gpu) == list(measure.GPU_LADDER) and gpu["cuBLAS"] > gpu["naive, cols\ninner"]
