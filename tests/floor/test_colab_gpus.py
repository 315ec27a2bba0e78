"""Are the presets of Colab's GPUs (T4, L4, A100 40GB) the datasheets' numbers, and is the SM array right?"""

import pytest

from mlsys_lab.hardware import A100_40GB, A100_80GB, H100_SXM, H200, L4, PRESETS, T4, Hardware

TB, GB, KiB = 1e12, 1e9, 1024

# (preset, datasheet: FP32, dense FP16 tensor, dense BF16 tensor or None, bandwidth, memory; SMs, shared/SM, CC)
# T4 datasheet: 8.1 FP32, 65 FP16 mixed precision, 320 GB/s, 16 GB; Turing whitepaper: 40 SMs; CC 7.5, 64 KB.
# L4 datasheet: 30.3 FP32, 242* FP16/BF16 (halved: 121), 300 GB/s, 24 GB; 7,424 CUDA cores / 128 = 58 SMs; 8.9, 100 KB.
# A100 40GB: 19.5 FP32, 312 FP16/BF16 dense, 1,555 GB/s, 40 GB; 108 SMs; 8.0, 164 KB.
DATASHEETS = {
    "T4": (T4, 8.1, 65, None, 320, 16, 40, 64, (7, 5)),
    "L4": (L4, 30.3, 121, 121, 300, 24, 58, 100, (8, 9)),
    "A100 40GB": (A100_40GB, 19.5, 312, 312, 1555, 40, 108, 164, (8, 0)),
}


@pytest.mark.parametrize("label", DATASHEETS)
def test_preset_is_the_datasheet(label):
    hw, fp32, fp16, bf16, bandwidth_gb, memory_gb, sms, smem_kib, cc = DATASHEETS[label]
    assert hw.name in PRESETS
    assert hw.peak("fp32") == pytest.approx(fp32 * TB)
    assert hw.peak("fp16") == pytest.approx(fp16 * TB)
    if bf16 is None:
        with pytest.raises(ValueError, match="dtype"):
            hw.peak("bf16")  # Turing has no bf16 tensor cores
    else:
        assert hw.peak("bf16") == pytest.approx(bf16 * TB)
    assert hw.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth_gb * GB)
    assert hw.memory_bytes == pytest.approx(memory_gb * GB)
    assert (hw.sm_count, hw.shared_memory_per_sm_bytes, hw.compute_capability) == (sms, smem_kib * KiB, cc)


def test_sm_arrays_of_the_other_gpus():
    """A100 80GB shares the 40GB part's SMs; H100 and H200 SXM5: 132 SMs, 228 KB each, compute capability 9.0."""
    assert (A100_80GB.sm_count, A100_80GB.shared_memory_per_sm_bytes) == (A100_40GB.sm_count, 164 * KiB)
    for hw in (H100_SXM, H200):
        assert (hw.sm_count, hw.shared_memory_per_sm_bytes, hw.compute_capability) == (132, 228 * KiB, (9, 0))


def test_fp32_peak_follows_from_the_sm_array():
    """FP32 peak = SMs x FP32 lanes per SM x 2 FLOP x boost clock: T4 40 x 64 x 2 x 1.59 GHz = 8.1 TFLOP/s;
    A100 108 x 64 x 2 x 1.41 GHz = 19.5; L4 58 x 128 x 2 x 2.04 GHz = 30.3 (clocks from the whitepapers)."""
    for hw, lanes, ghz in ((T4, 64, 1.59), (A100_40GB, 64, 1.41), (L4, 128, 2.04)):
        assert hw.sm_count * lanes * 2 * ghz * 1e9 == pytest.approx(hw.peak("fp32"), rel=0.01)


def test_bad_sm_array_names_the_field():
    base = dict(name="toy", peak_flop_per_s={"fp32": 1e12}, memory_bandwidth_bytes_per_s=1e11, memory_bytes=1e9)
    with pytest.raises(ValueError, match="sm_count"):
        Hardware(**base, sm_count=0)
    with pytest.raises((TypeError, ValueError), match="shared_memory_per_sm_bytes"):
        Hardware(**base, shared_memory_per_sm_bytes=1.5)
    with pytest.raises((TypeError, ValueError), match="compute_capability"):
        Hardware(**base, compute_capability=(8,))
    assert Hardware(**base).sm_count is None  # CPUs and measured records carry no SM array
