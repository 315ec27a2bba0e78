"""Does the warp analyzer count sectors and bank conflicts as the CUDA guide describes?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.memory_hierarchy import simt


@pytest.mark.parametrize(("stride", "sectors"), [(0, 1), (1, 4), (2, 8), (4, 16), (8, 32), (32, 32)])
def test_strided_float_reads(stride, sectors):
    assert simt.sectors_per_request(simt.strided_addresses(stride))[0] == sectors
    if stride:
        assert simt.strided_sectors(stride) == sectors


def test_efficiency_of_coalesced_strided_and_misaligned_reads():
    assert simt.coalescing_efficiency(simt.strided_addresses(1))[0] == 1.0
    assert simt.coalescing_efficiency(simt.strided_addresses(32))[0] == 0.125
    # shifted by one float: the 128 bytes straddle 5 sectors
    assert simt.sectors_per_request(simt.strided_addresses(1, offset=1))[0] == 5
    assert simt.coalescing_efficiency(simt.strided_addresses(1, offset=1))[0] == pytest.approx(128 / 160)
    # float4 per lane: 512 bytes in 16 sectors, fully used
    assert simt.sectors_per_request(simt.lanes() * 16, access_bytes=16)[0] == 16


def test_random_addresses_against_a_brute_force_count():
    g = np.random.default_rng()
    addresses = g.integers(0, 4096, size=(20, 32)) * 4
    expected = [len({a // 32 for a in row}) for row in addresses]
    np.testing.assert_array_equal(simt.sectors_per_request(addresses), expected)


def test_bank_conflicts_follow_gcd():
    for stride in range(1, 33):
        assert simt.bank_conflict_degree(simt.lanes() * stride)[0] == simt.strided_bank_conflict(stride)
    assert simt.strided_bank_conflict(2) == 2 and simt.strided_bank_conflict(3) == 1
    assert simt.strided_bank_conflict(32) == 32 and simt.strided_bank_conflict(0) == 1


def test_broadcast_is_not_a_conflict():
    assert simt.bank_conflict_degree(np.zeros(32, dtype=int))[0] == 1
    # 16 lanes read word 0 and 16 read word 32: two distinct words in bank 0
    assert simt.bank_conflict_degree(np.repeat([0, 32], 16))[0] == 2


def test_transpose_padding_removes_the_32_way_conflict():
    plain, padded = simt.transpose_tile_access(pad=0, row=3), simt.transpose_tile_access(pad=1, row=3)
    assert (plain.store_passes, plain.load_passes) == (1, 32)
    assert (padded.store_passes, padded.load_passes) == (1, 1)


def test_naive_sgemm_reads_a_column_per_warp():
    naive = simt.sgemm_naive_addresses(5, n_k=4096, n_cols=4096, coalesced=False)
    good = simt.sgemm_naive_addresses(5, n_k=4096, n_cols=4096, coalesced=True)
    assert simt.sectors_per_request(naive["A"])[0] == 32 and simt.sectors_per_request(naive["B"])[0] == 1
    assert simt.sectors_per_request(good["A"])[0] == 1 and simt.sectors_per_request(good["B"])[0] == 4


def test_bad_shapes_are_value_errors():
    with pytest.raises(ValueError, match=r"shape \(32,\) or \(warps, 32\)"):
        simt.sectors_per_request(np.arange(16))
    with pytest.raises(ValueError, match="must be >= 0"):
        simt.bank_conflict_degree(-simt.lanes())
    with pytest.raises(ValueError, match="element_bytes must be one of"):
        simt.strided_sectors(1, 3)


def test_strided_copy_time_is_traffic_over_bandwidth():
    """Stride 1: 4 sectors per 32 floats read = 4 bytes, plus the 4-byte write: 8 bytes per element."""
    assert simt.strided_copy_bytes(1) == 8.0 and simt.strided_copy_bytes(8) == 36.0
    assert simt.strided_copy_seconds(1000, 1, 8e9) == pytest.approx(1e-6)
    assert simt.strided_copy_seconds(1000, 16, 1e9, sector_bytes=64) == pytest.approx(1000 * 68 / 1e9)


def test_warp_access_in_either_space():
    access = simt.warp_access(simt.SPACES[0], 1, 1, 4)  # shifted by one float: 5 sectors for 128 bytes
    assert access.cost == 5 and access.best_cost == 4 and access.slots.max() == 4
    assert access.efficiency == pytest.approx(128 / (5 * 32))
    access = simt.warp_access(simt.SPACES[1], 2, 0, 4)  # even words only: 2 per bank
    assert access.cost == 2 and access.efficiency == 0.5
    assert sorted(set(access.slots.tolist())) == list(range(0, 32, 2))
    wide = simt.warp_access(simt.SPACES[1], 1, 0, 8)  # float2 per lane: 256 bytes, 2 passes, the fewest
    assert wide.cost == 2 and wide.best_cost == 2 and wide.efficiency == 1.0
    with pytest.raises(ValueError, match="space must be one of"):
        simt.warp_access("texture", 1, 0, 4)


def test_wide_shared_accesses_by_hand():
    """float4 tile[lane]: banks 4L..4L+3, each bank asked for 4 words (lanes L, L+8, L+16, L+24): 4 passes."""
    lane = simt.lanes()
    assert simt.shared_passes(lane * 16, 16)[0] == 4
    assert simt.shared_passes(lane * 8, 8)[0] == 2
    assert simt.shared_passes(lane * 32, 16)[0] == 8  # float4 at stride 2: banks 0-3, 8-11, ... 8 words each
    assert simt.shared_passes(np.zeros(32, dtype=int), 16)[0] == 1  # broadcast: 4 words, one per bank
    assert simt.shared_passes((lane % 8) * 16, 16)[0] == 1  # 8 distinct float4s cover the 32 banks once
    with pytest.raises(ValueError, match="multiples of access_bytes"):
        simt.shared_passes(lane * 4 + 4, 8)
    with pytest.raises(ValueError, match="access_bytes"):
        simt.shared_passes(lane * 4, 2)


def test_broadcast_is_the_cheapest_global_request():
    assert simt.sectors_per_request(simt.strided_addresses(0))[0] == 1
    assert simt.coalescing_efficiency(simt.strided_addresses(0))[0] == 1.0
    assert simt.coalescing_efficiency(simt.strided_addresses(2))[0] == 0.5  # 4 sectors of data in 8
