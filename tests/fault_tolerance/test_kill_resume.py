"""Does a run killed with SIGKILL at random points resume bit for bit, and does an atomic write survive?"""

import numpy as np
import pytest

from mlsys_lab.fault_tolerance import checkpoint_io as fc
from mlsys_lab.fault_tolerance import kill_resume as fault_kill

TOTAL, EVERY = 200, 5


def test_twenty_random_sigkills_every_resume_bitwise_identical(tmp_path):
    config = fc.TrainConfig()
    digests = fc.uninterrupted_digests(TOTAL, config)
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
    digests = fc.uninterrupted_digests(TOTAL, config)
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
