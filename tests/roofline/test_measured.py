"""Are the recorded kernels placed against the same run's measured ceilings?"""

from __future__ import annotations

import math

import pytest

from mlsys_lab import records
from mlsys_lab.operators import matmul_cost
from mlsys_lab.roofline import measured


def test_measured_hardware_holds_the_recorded_ceilings():
    run = records.load("roofline_h200")
    gpu = measured.measured_hardware(run)
    assert gpu.peak("fp32") == run["ceilings"]["sgemm_cublas_fp32"]["flop_per_s"]
    assert gpu.memory_bandwidth_bytes_per_s == run["ceilings"]["copy_cupy"]["bytes_per_s"]
    assert gpu.cache_bandwidth_bytes_per_s["L2"] > gpu.memory_bandwidth_bytes_per_s and math.isnan(gpu.memory_bytes)


def test_recorded_kernels_are_at_or_under_their_roof():
    run, kernels = records.load("roofline_h200"), records.load("memory_h200")
    measured_kernels = measured.measured_kernels(run, kernels)
    assert len(measured_kernels) >= 10
    assert all(0 < k.fraction_of_roofline < 1.1 for k in measured_kernels)
    cublas = next(k for k in measured_kernels if k.name == "cuBLAS sgemm")
    n = kernels["sgemm"]["n"]
    assert cublas.cost == matmul_cost(n, n, n)
    # cuBLAS sets the FP32 roof of the same run (measured at 4096^3 too), so it sits at its roof
    assert cublas.predicted_seconds == pytest.approx(2 * n**3 / run["ceilings"]["sgemm_cublas_fp32"]["flop_per_s"])
