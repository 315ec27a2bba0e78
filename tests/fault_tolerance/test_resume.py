"""Does a manifest-last checkpoint round-trip bit for bit, and does the reference resume survive kills?"""

import hashlib
import json

import numpy as np
import pytest

from mlsys_lab.exercises.fault_tolerance_kill import files_of, snapshot
from mlsys_lab.exercises.fault_tolerance_resume import TEARS, reference_train, resume_case, tear, valid_steps
from mlsys_lab.fault_tolerance import resume
from mlsys_lab.fault_tolerance.checkpoint_io import make_data


def test_state_round_trips_bit_for_bit():
    x, y = make_data(resume.CONFIG)
    state = resume.fresh_state()
    for batch in resume.random_batches(3, seed=1):
        resume.train_step(state, x, y, batch)
    again = resume.from_bytes(resume.to_bytes(state))
    assert again["step"] == 3 and resume.digest(again) == resume.digest(state)
    assert all(np.array_equal(again["m"][k], state["m"][k]) for k in state["m"])


def test_manifest_is_written_last_and_names_the_data(tmp_path):
    state = resume.fresh_state()
    state["step"] = 7
    resume.save_checkpoint(tmp_path, state)
    meta = json.loads((tmp_path / "ckpt_7.json").read_text())
    data = (tmp_path / meta["file"]).read_bytes()
    assert meta["step"] == 7 and meta["n_bytes"] == len(data)
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_7.bin", "ckpt_7.json"]


@pytest.mark.parametrize("how", list(TEARS))
def test_every_tear_makes_the_checkpoint_invalid(tmp_path, how):
    state = resume.fresh_state()
    for step in (5, 10):
        state["step"] = step
        resume.save_checkpoint(tmp_path, state)
    files = snapshot(tmp_path)
    tear(files, 10, how)
    assert sorted(valid_steps(files_of(files))) == [5]


def test_uninterrupted_matches_a_plain_loop():
    batches = resume.random_batches(6, seed=2)
    x, y = make_data(resume.CONFIG)
    state = resume.fresh_state()
    for batch in batches:
        resume.train_step(state, x, y, batch)
    assert resume.uninterrupted(batches)[6] == resume.digest(state)


def test_reference_survives_kills_and_tears():
    assert resume_case(reference_train, 23, [3, 12, 17], {1: ["data", "flip"], 2: ["json"]}, seed=4) == "ok"


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="n_steps"):
        resume.random_batches(0)
    with pytest.raises(ValueError, match="step"):
        resume.save_checkpoint("/nonexistent", resume.fresh_state())  # step 0 is no checkpoint
