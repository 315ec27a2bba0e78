"""Does the roofline explorer place operators right, and do the lesson 03 checks catch wrong answers?"""

from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

import pytest

from mlsys_lab import records
from mlsys_lab.exercises import roofline as ex
from mlsys_lab.hardware import H200
from mlsys_lab.roofline import model as roofline
from mlsys_lab.widgets.roofline import RooflineExplorer, operator_cost, place


def verdict(check, fn) -> str:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        check(fn)
    return buffer.getvalue().strip()


def test_explorer_moves_the_point_across_the_ridge():
    explorer = RooflineExplorer()
    assert explorer.error is None and explorer.readout["bound"] == "compute"  # 4096^3 fp32 matmul
    explorer.set(operator="linear layer (batch x d)", dtype="bf16", m=16, n=4096)
    assert explorer.readout["bound"] == "memory"
    explorer.set(m=1024)
    assert explorer.readout["bound"] == "compute"
    assert explorer.result.attainable_flops == pytest.approx(H200.peak("bf16"))


def test_explorer_shows_a_bad_dtype_in_place():
    explorer = RooflineExplorer()
    explorer.set(hardware="Generic 8-core AVX2 CPU", dtype="bf16")
    assert "dtype must be one of fp64, fp32" in explorer.error
    explorer.set(dtype="fp32")
    assert explorer.error is None


def test_place_matches_the_formula():
    point = place(H200, "elementwise add", 1024, 1024, 1, "fp32")
    assert point.cost.intensity == pytest.approx(1 / 12)
    assert point.seconds == pytest.approx(12 * 1024 * 1024 / 4.8e12)
    with pytest.raises(ValueError, match="operator must be one of"):
        operator_cost("conv", 1, 1, 1, "fp32")


def test_recorded_gpu_run_is_consistent():
    run, kernels = records.load("roofline_h200"), records.load("memory_h200")
    assert run["device"]["name"].startswith("NVIDIA") and "date_utc" in run["device"]
    measured = roofline.measured_kernels(run, kernels)
    assert len(measured) >= 10
    assert all(0 < k.fraction_of_roofline < 1.1 for k in measured)
    for sweep in roofline.littles_law_sweeps(run):
        assert sweep.latency > 0 and sweep.peak > 0
        assert (sweep.throughput <= sweep.peak * 1.05).all()


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
