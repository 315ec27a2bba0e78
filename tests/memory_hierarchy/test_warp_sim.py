"""Does the warp simulator count each request as the warp model does, and refuse what a warp cannot do?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.memory_hierarchy import warp_sim

LANE = np.arange(32)


def test_requests_are_counted_from_their_addresses():
    """By hand: x[lane] is 4 sectors, x[32 lane] 32, x[0..7] 1, a single float 1; a 16-lane request half a warp."""
    x = warp_sim.GlobalArray(np.arange(2048), "x")
    x[LANE]
    x[32 * LANE]
    x[np.arange(8)]
    x[5]
    x[np.arange(16) * 2]  # 16 floats 8 bytes apart: 128 bytes, 4 sectors
    assert x.load_sectors == 4 + 32 + 1 + 1 + 4 and x.store_sectors == 0
    x[LANE] = 1.0
    assert x.store_sectors == 4


def test_loads_return_the_values_and_stores_write_them():
    x = warp_sim.GlobalArray(np.arange(64), "x")
    np.testing.assert_array_equal(x[LANE + 32], np.arange(32, 64))
    assert x[3] == 3.0 and isinstance(x[3], float)
    x[LANE] = LANE * 2
    np.testing.assert_array_equal(x[LANE], LANE * 2)


def test_shared_passes_and_the_uninitialised_nan():
    tile = warp_sim.SharedArray(32 * 33)
    assert np.isnan(tile[LANE]).all()  # nothing stored yet: what a missing barrier reads
    tile[LANE * 32] = 1.0  # one column of a 32-wide tile: bank 0, 32 words
    tile[LANE * 33] = 2.0  # padded: 32 banks
    tile[np.zeros(32, dtype=int)]  # broadcast
    assert tile.passes == 1 + 32 + 1 + 1


def test_bad_requests_name_the_array_and_the_rule():
    x = warp_sim.GlobalArray(np.zeros(64), "A")
    with pytest.raises(IndexError, match=r"A\[index\]: index out of range 0..63"):
        x[LANE + 40]
    with pytest.raises(TypeError, match="1 to 32 ints"):
        x[np.arange(33)]
    with pytest.raises(TypeError, match="1 to 32 ints"):
        x[LANE * 1.0]
    with pytest.raises(ValueError, match="one per lane"):
        x[LANE] = np.zeros(5)


def test_launch_stops_a_block_that_loops_over_threads():
    def one_lane_at_a_time(bx, x, out, partial):
        for i in range(256):
            partial[i] = x[i]

    with pytest.raises(RuntimeError, match="more than 100 memory requests in one block"):
        warp_sim.run_reduce(one_lane_at_a_time, np.zeros(256), max_requests=100)


def test_the_naive_transpose_is_right_and_its_writes_are_strided():
    """Per 32 x 32 tile: 32 coalesced reads (4 sectors), 32 writes 64 floats apart (32 sectors each)."""
    a = np.arange(64 * 96, dtype=np.float32).reshape(64, 96)
    b, counts = warp_sim.run_transpose(warp_sim.transpose_naive_block, a)
    np.testing.assert_array_equal(b, a.T)
    tiles = 6
    assert counts.load_sectors == tiles * 32 * 4 and counts.store_sectors == tiles * 32 * 32
    assert counts.shared_requests == 0 and counts.per_array["B"]["requests"] == tiles * 32


def test_launch_gives_each_block_fresh_shared_memory():
    seen = []

    def kernel(bx, x, out, partial):
        seen.append(bool(np.isnan(partial[LANE]).all()))
        partial[LANE] = 1.0
        out[bx] = 0.0

    warp_sim.run_reduce(kernel, np.zeros(3 * 256))
    assert seen == [True, True, True]


def test_bad_launches_are_value_errors():
    with pytest.raises(ValueError, match="multiples of 32"):
        warp_sim.run_transpose(warp_sim.transpose_naive_block, np.zeros((32, 40)))
    with pytest.raises(ValueError, match="multiple of 256"):
        warp_sim.run_reduce(lambda *a: None, np.zeros(300))
    with pytest.raises(ValueError, match="grid"):
        warp_sim.launch(lambda *a: None, (1, 1, 1), [], 32)
