"""Does the checkpoint storage model give the hand-worked bytes and seconds?"""

import pytest

from mlsys_lab.fault_tolerance import storage


def test_storage_burst_by_hand():
    total = storage.checkpoint_bytes(405e9)  # 14 B/param
    assert total == pytest.approx(5.67e12)
    assert storage.checkpoint_bytes_per_gpu(405e9, 16384) == pytest.approx(5.67e12 / 16384)
    # 2,048 nodes × 50 GB/s would be 102 TB/s; a 2 TB/s store is the bottleneck
    assert storage.burst_write_seconds(total, 2048, 50e9, 2e12) == pytest.approx(2.835)
    tier = storage.tiered_checkpoint(total, 2048, 5e9, 2e12, 1800.0)
    assert tier["stall_seconds"] == pytest.approx(5.67e12 / (2048 * 5e9))
    assert tier["store_bytes_per_s_needed"] == pytest.approx(5.67e12 / 1800) and tier["keeps_up"]
    # 10^6 writes of 1 MB on 100 disks: 10^6·8 ms + 1 TB / 200 MB/s, over 100 disks
    assert storage.hdd_write_seconds(10**6, 1e12, 100) == pytest.approx((8000 + 5000) / 100)
    assert storage.aggregated_writes(1e12, 64e6) == 15625


def test_checkpoint_bytes_per_param_tables_add_up():
    assert sum(storage.TRAINING_BYTES_PER_PARAM.values()) == 16  # mixed-precision Adam in GPU memory
    assert sum(storage.CHECKPOINT_BYTES_PER_PARAM.values()) == 14  # what the default checkpoint saves
    assert storage.checkpoint_bytes(1e12, 12) == pytest.approx(12e12)  # minimal: no bf16 copy


@pytest.mark.parametrize("call, name", [
    (lambda: storage.burst_write_seconds(1e9, 0, 1e9, 1e9), "n_nodes"),
    (lambda: storage.checkpoint_bytes(0), "n_params"),
    (lambda: storage.tiered_checkpoint(1e9, 1, 1e9, 1e9, 0), "interval_seconds"),
    (lambda: storage.aggregated_writes(1e9, 0), "object_bytes"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
