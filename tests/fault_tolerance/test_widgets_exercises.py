"""Does the goodput explorer show the right optimum, and do the lesson's checks pass right answers only?"""

import io
import os
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from mlsys_lab.exercises import fault_tolerance as ex
from mlsys_lab.fault_tolerance import reliability as fault
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic, write_in_place


def verdict(check, fn):
    out = io.StringIO()
    with redirect_stdout(out):
        check(fn)
    return out.getvalue().strip()


def test_explorer_optimum_and_bad_input():
    from mlsys_lab.widgets.fault_tolerance import GoodputExplorer

    explorer = GoodputExplorer()
    result = explorer.set(n_gpus=16384, gpu_mttf_days=2000, checkpoint_seconds=30, restart_seconds=300)
    mttf = fault.cluster_mttf(2000 * 86400, 16384)
    assert result["young"] == pytest.approx(np.sqrt(2 * 30 * mttf), rel=1e-9)
    assert result["best"] == pytest.approx(fault.optimal_interval(30, mttf))
    grid_best = result["grid"][np.argmax(result["exact"])]
    assert grid_best == pytest.approx(result["best"], rel=0.05)
    expected = fault.expected_goodput(result["points"], 30, 300, mttf)
    assert np.all(np.abs(result["simulated"] - expected) < 0.03)
    assert explorer.readout["goodput at optimum"].endswith("%") and explorer.error is None
    explorer.controls["checkpoint_seconds"].value = 0  # outside the slider: clamped, still valid
    assert explorer.error is None
    explorer.compute(n_gpus=16, gpu_mttf_days=100, checkpoint_seconds=30, restart_seconds=300)
    with pytest.raises(ValueError, match="checkpoint_cost"):
        explorer.compute(n_gpus=16, gpu_mttf_days=100, checkpoint_seconds=-1, restart_seconds=300)


def test_interval_and_goodput_checks():
    young = lambda n, h, c: np.sqrt(2 * c * h * 3600 / n)  # noqa: E731
    assert verdict(ex.check_checkpoint_interval, young).startswith("✓")
    assert verdict(ex.check_checkpoint_interval, lambda n, h, c: young(1, h, c)).startswith("✗")
    exact = lambda t, c, r, m: t / (m * np.exp(r / m) * np.expm1((t + c) / m))  # noqa: E731
    assert verdict(ex.check_goodput, exact).startswith("✓")
    assert verdict(ex.check_goodput, lambda t, c, r, m: 1 - c / t - (t / 2 + r) / m).startswith("✗")


def test_crash_safe_writer_check_kills_mid_write():
    assert verdict(ex.check_crash_safe_writer, write_atomic) == "✓ crash_safe_writer: 8/8 cases"

    def in_place_with_ceremony(path, chunks):
        """Every durability step of the atomic writer (fsync, rename, folder fsync), but the bytes go over the
        old file: the check sees it write into the checkpoint (inotify) and keep its inode."""
        write_in_place(path, chunks)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(path, Path(path))
        folder = os.open(Path(path).parent, os.O_RDONLY)
        os.fsync(folder)
        os.close(folder)

    line = verdict(ex.check_crash_safe_writer, in_place_with_ceremony)
    assert line.startswith("✗") and ("written to in place" in line or "same inode" in line), line
    old, new = b"o" * 3000, bytes(range(250)) * 200  # chunks of 10 kB: larger than a file object's buffer
    torn = ex._writer_case(write_in_place, old, new, 10_000, 2)  # killed while waiting for the third chunk
    assert torn == "SIGKILL while the writer waited for chunk 3 of 5: the checkpoint was 20000 bytes, neither the " \
                   "old 3000 nor the new 50000: torn", torn
    assert ex._writer_case(write_in_place, old, new, 1_000, 2).endswith("was 0 bytes, neither the old 3000 nor the "
                                                                        "new 50000: torn")  # all still buffered
    assert ex._writer_case(write_atomic, old, new, 10_000, 2) == "ok"

    def todo(path, chunks):
        raise NotImplementedError()

    assert verdict(ex.check_crash_safe_writer, todo) == "… crash_safe_writer: not attempted yet"


def test_storage_explorer_matches_the_storage_model():
    from mlsys_lab.fault_tolerance.storage import burst_write_seconds, tiered_checkpoint
    from mlsys_lab.widgets.fault_tolerance import CheckpointStorageExplorer

    explorer = CheckpointStorageExplorer()
    result = explorer.set(n_params_billion=405, n_gpus=16384, bytes_per_param=14, store_gb_per_s=2000,
                          local_gb_per_s=5, interval_minutes=30)
    assert result["total"] == pytest.approx(5.67e12)
    assert result["seconds"][0] == pytest.approx(burst_write_seconds(5.67e12, 2048, 50e9, 2e12))
    tier = tiered_checkpoint(5.67e12, 2048, 5e9, 2e12, 1800)
    assert result["stall_seconds"] == pytest.approx(tier["stall_seconds"])
    assert explorer.readout["drain keeps up"] == "yes"
    explorer.set(store_gb_per_s=10, interval_minutes=1)  # 5.67 TB at 10 GB/s takes 9.5 min > 1 min
    assert explorer.readout["drain keeps up"] == "no" and explorer.error is None
