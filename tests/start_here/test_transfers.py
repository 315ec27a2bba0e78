"""Are a tensor's bytes and its transfer times over each link the hand-worked numbers?"""

from __future__ import annotations

import math

import pytest

from mlsys_lab.hardware import H100_SXM, H200, Hardware
from mlsys_lab.start_here import fits_in_memory, tensor_bytes, transfer_times


def test_tensor_bytes_by_hand():
    assert tensor_bytes((4096, 4096), "fp16") == 4096 * 4096 * 2 == 33_554_432
    assert tensor_bytes((7,), "fp32") == 28
    assert tensor_bytes((3, 5), "int4") == 7.5  # two values per byte
    assert tensor_bytes((70_000_000_000,), "bf16") == 140e9  # a 70B-parameter model
    with pytest.raises(ValueError, match=r"shape\[1\] must be an integer >= 1"):
        tensor_bytes((4, 0), "fp32")
    with pytest.raises(ValueError, match="dtype must be one of"):
        tensor_bytes((4,), "fp7")


def test_transfer_times_over_each_link_of_an_h100():
    """140 GB: 140e9 / 3.35e12 = 41.8 ms from HBM, / 450e9 = 311 ms over NVLink, / 64e9 = 2.19 s over PCIe."""
    times = transfer_times(140e9, H100_SXM)
    assert list(times)[0] == "memory (HBM/DRAM)"
    assert times["memory (HBM/DRAM)"] == pytest.approx(140e9 / 3.35e12)
    assert times["NVLink 4"] == pytest.approx(140e9 / 450e9)
    assert times["PCIe 5 x16"] == pytest.approx(140e9 / 64e9)


def test_fits_in_memory():
    assert fits_in_memory(140e9, H200) and not fits_in_memory(140e9, H100_SXM)
    unknown = Hardware("probe", {"fp32": 1e12}, 1e11, memory_bytes=math.nan)
    assert not fits_in_memory(1.0, unknown)
