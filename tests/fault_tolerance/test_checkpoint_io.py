"""Does a run killed with SIGKILL at random points resume bit for bit, and does an atomic write survive?"""

import numpy as np
import pytest

from mlsys_lab.fault_tolerance import checkpoint_io as fc
from mlsys_lab.fault_tolerance import kill_resume as fault_kill

TOTAL, EVERY = 200, 5


def reference_digests(config):
    """Digest of the state at every checkpoint step of an uninterrupted run, without touching disk."""
    x, y = fc.make_data(config)
    state, digests = fc.init_state(config), {}
    while state["step"] < TOTAL:
        fc.train_step(state, x, y, config)
        if state["step"] % EVERY == 0:
            digests[state["step"]] = fc.state_digest(state)
    return digests


def test_state_round_trips_through_bytes_and_resume_matches():
    config = fc.TrainConfig()
    x, y = fc.make_data(config)
    a, b = fc.init_state(config), fc.init_state(config)
    for _ in range(37):  # crosses an epoch boundary (512 / 32 = 16 steps per epoch)
        fc.train_step(a, x, y, config)
        fc.train_step(b, x, y, config)
    b = fc.state_from_bytes(fc.state_to_bytes(b))
    for _ in range(30):
        fc.train_step(a, x, y, config)
        fc.train_step(b, x, y, config)
    assert fc.state_digest(a) == fc.state_digest(b)
    assert a["epoch"] == 4


def test_forgetting_the_rng_state_breaks_bitwise_resume():
    config = fc.TrainConfig()
    x, y = fc.make_data(config)
    a = fc.init_state(config)
    for _ in range(20):
        fc.train_step(a, x, y, config)
    b = fc.state_from_bytes(fc.state_to_bytes(a))
    b["rng"] = fc.init_state(config)["rng"]  # a checkpoint that did not save the data-order generator
    for _ in range(20):
        fc.train_step(a, x, y, config)
        fc.train_step(b, x, y, config)
    assert not np.array_equal(a["params"]["w1"], b["params"]["w1"])


def test_twenty_random_sigkills_every_resume_bitwise_identical(tmp_path):
    config = fc.TrainConfig()
    digests = reference_digests(config)
    g = np.random.default_rng(0)
    # the last kill leaves 60 steps and 12 checkpoints to go: more than the jitter, so all 20 kills land
    kill_steps = np.sort(g.choice(np.arange(1, TOTAL - 60), size=20, replace=False))
    # each kill lands 0–2 ms after the child reports its step: inside a step, a serialization or a write
    log = fault_kill.run_killed_at_steps(tmp_path, TOTAL, EVERY, kill_steps, jitter_seconds=0.002, seed=1,
                                         config=config)
    assert sum(entry["killed"] for entry in log) == 20, log
    steps = [entry["checkpoint_step"] for entry in log]
    assert None not in steps and steps == sorted(steps) and steps[-1] == TOTAL
    for entry, target in zip(log, kill_steps, strict=False):  # the kill came after step `target` ran
        assert entry["checkpoint_step"] >= target - EVERY, (entry, target)
    for entry in log:  # every checkpoint a resume started from is the uninterrupted run's state, bit for bit
        if entry["checkpoint_step"]:
            assert entry["checkpoint_digest"] == digests[entry["checkpoint_step"]], entry
    assert fc.state_digest(fc.load_checkpoint(tmp_path / "ckpt.npz")) == digests[TOTAL]


def test_kill_steps_must_increase(tmp_path):
    with pytest.raises(ValueError, match="kill_steps"):
        fault_kill.run_killed_at_steps(tmp_path, TOTAL, EVERY, [10, 5])
    with pytest.raises(ValueError, match="kill_steps"):
        fault_kill.run_killed_at_steps(tmp_path, TOTAL, EVERY, [TOTAL])


def test_kill_mid_write_tears_in_place_but_not_atomic(tmp_path):
    config = fc.TrainConfig()
    digests = reference_digests(config)
    for name in ("unsafe", "safe"):
        (tmp_path / name).mkdir()
    steps = np.arange(2 * EVERY, TOTAL + 1, EVERY)
    for step in np.random.default_rng(2).choice(steps, size=3, replace=False):
        for name in ("unsafe", "safe"):
            (tmp_path / name / "ckpt.npz").unlink(missing_ok=True)
        unsafe = fault_kill.kill_mid_write(tmp_path / "unsafe", TOTAL, EVERY, int(step), config,
                                           fc.write_in_place)
        assert unsafe["killed"] and unsafe["checkpoint_step"] is None
        with pytest.raises(ValueError, match="corrupt"):
            fc.load_checkpoint(tmp_path / "unsafe" / "ckpt.npz")
        safe = fault_kill.kill_mid_write(tmp_path / "safe", TOTAL, EVERY, int(step), config, fc.write_atomic)
        assert safe["killed"] and safe["checkpoint_step"] == step - EVERY  # the previous one, intact
        assert safe["checkpoint_digest"] == digests[step - EVERY]


def test_kills_at_random_times_during_slow_writes_never_tear_atomic_checkpoints(tmp_path):
    log = fault_kill.run_killed(tmp_path, 100, EVERY, [0.15] * 4, writer=fc.write_atomic,
                                pause_between_chunks=0.005)
    assert sum(entry["killed"] for entry in log) >= 2
    assert None not in [entry["checkpoint_step"] for entry in log] and log[-1]["checkpoint_step"] == 100


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
