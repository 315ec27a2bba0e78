"""Does the whole training state round-trip through a checkpoint, and does the async writer save a snapshot?"""

import numpy as np
import pytest

from mlsys_lab.fault_tolerance import checkpoint_io as fc


def test_state_round_trips_through_bytes_and_resume_matches():
    config = fc.TrainConfig()
    x, y = fc.make_data(config)
    a, b = fc.init_state(config), fc.init_state(config)
    for _ in range(37):  # crosses an epoch boundary (512 / 32 = 16 steps per epoch)
        fc.resumable_train_step(a, x, y, config)
        fc.resumable_train_step(b, x, y, config)
    b = fc.state_from_bytes(fc.state_to_bytes(b))
    for _ in range(30):
        fc.resumable_train_step(a, x, y, config)
        fc.resumable_train_step(b, x, y, config)
    assert fc.state_digest(a) == fc.state_digest(b)
    assert a["epoch"] == 4


def test_forgetting_the_rng_state_breaks_bitwise_resume():
    config = fc.TrainConfig()
    x, y = fc.make_data(config)
    a = fc.init_state(config)
    for _ in range(20):
        fc.resumable_train_step(a, x, y, config)
    b = fc.state_from_bytes(fc.state_to_bytes(a))
    b["rng"] = fc.init_state(config)["rng"]  # a checkpoint that did not save the data-order generator
    for _ in range(20):
        fc.resumable_train_step(a, x, y, config)
        fc.resumable_train_step(b, x, y, config)
    assert not np.array_equal(a["params"]["w1"], b["params"]["w1"])


def test_uninterrupted_digests_follow_the_steps_an_in_memory_run_takes():
    config = fc.TrainConfig()
    digests = fc.uninterrupted_digests(40, config)
    assert sorted(digests) == list(range(1, 41))
    x, y = fc.make_data(config)
    state = fc.init_state(config)
    for _ in range(40):
        fc.resumable_train_step(state, x, y, config)
    assert digests[40] == fc.state_digest(state)
    assert len(set(digests.values())) == 40  # every step changes the state
    with pytest.raises(ValueError, match="total_steps"):
        fc.uninterrupted_digests(0)


def test_async_checkpointer_writes_the_snapshot_not_the_later_state(tmp_path):
    arrays = {"w": np.arange(1000, dtype=np.float32)}
    saver = fc.AsyncCheckpointer(tmp_path / "a.bin")
    saver.save(arrays)
    arrays["w"] += 1  # training moves on while the write runs
    saver.wait()
    assert np.array_equal(np.frombuffer((tmp_path / "a.bin").read_bytes(), np.float32), np.arange(1000))
    snapshot = {"w": np.full(10, 7, dtype=np.float32)}
    saver.save(snapshot, copy=False)  # the caller's buffer is the snapshot (a pinned D2H copy on a GPU)
    assert isinstance(saver.busy, bool)
    saver.wait()
    assert not saver.busy
    assert np.array_equal(np.frombuffer((tmp_path / "a.bin").read_bytes(), np.float32), np.full(10, 7))
    stalls = fc.measure_checkpoint_stalls(1 << 20, 2, tmp_path, "async", 0.01)
    assert stalls.shape == (2,) and np.all(stalls >= 0)
    with pytest.raises(ValueError, match="mode"):
        fc.measure_checkpoint_stalls(1 << 20, 2, tmp_path, "later")
