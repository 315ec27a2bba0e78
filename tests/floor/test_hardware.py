"""Are the presets the datasheets' dense figures, and does the probe measure something real?"""

import math

import pytest

from mlsys_lab import hardware


def test_ridge_points_hand_computed():
    # H100 SXM: 67 TFLOP/s fp32 over 3.35 TB/s = 20 FLOP/byte; bf16 dense 989.5 / 3.35 = 295.4.
    assert hardware.H100_SXM.ridge_point("fp32") == pytest.approx(20.0)
    assert hardware.H100_SXM.ridge_point("bf16") == pytest.approx(295.37, rel=1e-3)
    # A100: 19.5 TFLOP/s / 2.039 TB/s = 9.56.
    assert hardware.A100_80GB.ridge_point("fp32") == pytest.approx(9.564, rel=1e-3)


def test_dense_tensor_figures_are_half_the_sparse_datasheet_numbers():
    assert hardware.H200.peak("bf16") * 2 == pytest.approx(1979e12)
    assert hardware.H200.peak("fp8") * 2 == pytest.approx(3958e12)


def test_generic_cpu_peak_is_its_derivation():
    assert hardware.GENERIC_CPU.peak("fp32") == pytest.approx(8 * 3.0e9 * 2 * 8 * 2)


def test_unknown_dtype_and_preset_are_named():
    with pytest.raises(ValueError, match="dtype must be one of"):
        hardware.A100_80GB.peak("fp8")
    with pytest.raises(ValueError, match="name must be one of"):
        hardware.preset("TPU v5")


def test_transfer_seconds_alpha_beta():
    assert hardware.transfer_seconds(1e9, 50e9, latency_s=2e-6) == pytest.approx(0.02 + 2e-6)
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s must be a number > 0"):
        hardware.transfer_seconds(1, 0)


def test_probe_measures_positive_finite_ceilings_and_caches():
    hardware.probe.cache_clear()
    first = hardware.probe(matmul_n=128, copy_mib=4)
    assert first is hardware.probe(matmul_n=128, copy_mib=4)
    for value in (*first.hardware.peak_flop_per_s.values(), first.hardware.memory_bandwidth_bytes_per_s):
        assert math.isfinite(value) and value > 0
    assert first.copy_bytes == 4 * 2**20
    assert "matmul" in first.summary()


def test_recorded_h200_probe_loads_with_its_date():
    h200 = hardware.recorded_probe("probe_h200")
    assert h200.name == "NVIDIA H200, measured 2026-12-01"
    # Measured cuBLAS fp32 sits below the 67 TFLOP/s datasheet peak; the copy below 4.8 TB/s.
    assert 0.5 * hardware.H200.peak("fp32") < h200.peak("fp32") < hardware.H200.peak("fp32")
    assert h200.memory_bandwidth_bytes_per_s < hardware.H200.memory_bandwidth_bytes_per_s
    with pytest.raises(ValueError, match="name must be one of the recorded measurements"):
        hardware.recorded_probe("probe_tpu")


def test_cpu_model_is_a_name():
    from mlsys_lab.hardware import cpu_model

    name = cpu_model()
    assert isinstance(name, str) and name.strip() and "\n" not in name


def test_colab_gpu_presets_by_hand():
    """Are Colab's GPUs there with their datasheet ridges? T4 fp32 8.1 TFLOP/s over 320 GB/s = 25.3 FLOP/B;
    L4 bf16 121 TFLOP/s dense over 300 GB/s = 403; A100 40GB bf16 312 over 1,555 GB/s = 200.6; T4 has no bf16."""
    from mlsys_lab.hardware import A100_40GB, L4, PRESETS, T4

    assert {"NVIDIA T4", "NVIDIA L4", "NVIDIA A100 40GB SXM"} <= set(PRESETS)
    assert T4.ridge_point("fp32") == pytest.approx(25.3125)
    assert L4.ridge_point("bf16") == pytest.approx(403.33, rel=1e-4)
    assert A100_40GB.ridge_point("bf16") == pytest.approx(200.64, rel=1e-4)
    with pytest.raises(ValueError, match="dtype"):
        T4.peak("bf16")
