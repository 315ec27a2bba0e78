"""The course's one occupancy calculator (mlsys_lab.occupancy), as lesson 04 and the kernels' fallback use it."""

import pytest

from mlsys_lab.occupancy import SM90, limits_of, occupancy

H200_ATTRIBUTES = {"MaxRegistersPerMultiprocessor": 65536, "MaxSharedMemoryPerMultiprocessor": 233472,
                   "MaxThreadsPerMultiProcessor": 2048, "MaxBlocksPerMultiprocessor": 32}
T4_ATTRIBUTES = {"MaxRegistersPerMultiprocessor": 65536, "MaxSharedMemoryPerMultiprocessor": 65536,
                 "MaxThreadsPerMultiProcessor": 1024, "MaxBlocksPerMultiprocessor": 16}


def test_the_h200s_attributes_give_sm90s_limits():
    assert limits_of(H200_ATTRIBUTES) == SM90


def test_a_t4_holds_half_the_warps_and_a_quarter_of_the_shared_memory():
    """A 256-thread block of 32 registers and no shared memory: 8 blocks on an H200 (64 warps), 4 on a T4 (32)."""
    t4 = limits_of(T4_ATTRIBUTES)
    assert occupancy(32, 256, 0, SM90).blocks_per_sm == 8
    assert occupancy(32, 256, 0, t4).blocks_per_sm == 4
    assert occupancy(32, 256, 0, t4).limited_by == "warps"
    # 24 KiB + 1 KiB reserved per block: 9 fit in the H200's 228 KiB, 2 in the T4's 64 KiB
    assert occupancy(32, 128, 24 * 1024, SM90).blocks_per_sm == 9
    assert occupancy(32, 128, 24 * 1024, t4).blocks_per_sm == 2


def test_attributes_that_are_not_a_gpus_are_refused():
    with pytest.raises(ValueError, match="MaxThreadsPerMultiProcessor missing"):
        limits_of({"MaxRegistersPerMultiprocessor": 1, "MaxSharedMemoryPerMultiprocessor": 1})
