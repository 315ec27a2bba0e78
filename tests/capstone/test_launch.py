"""A rank killed with SIGKILL mid-run: the job resumes from the last complete checkpoint and ends bit for bit where
the run never killed ends; a torn checkpoint is refused, not resumed from."""

import numpy as np
import pytest

from mlsys_lab.capstone import checkpoint
from mlsys_lab.capstone.launch import run_and_kill, run_data_parallel
from mlsys_lab.capstone.model import GPTConfig
from mlsys_lab.capstone.train import RunConfig, fresh_run, train
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic, write_in_place
from mlsys_lab.mpi import find_mpiexec

CONFIG = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=2, context=32), batch_size=8, lr=1e-2)

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")


@needs_mpi
@pytest.mark.parametrize("kill_rank", [1, 0])
def test_killed_and_resumed_run_ends_bitwise_equal_to_the_uninterrupted_one(tmp_path, piece_store, kill_rank):
    for name in ("whole", "killed"):
        (tmp_path / name).mkdir()
    whole = run_data_parallel(CONFIG, 60, folder=tmp_path / "whole", every=5)
    killed = run_and_kill(CONFIG, 60, tmp_path / "killed", kill_rank=kill_rank, kill_at_step=8, every=5)
    assert killed["exit_code"] != 0 and killed["killed_at_step"] >= 8
    assert killed["checkpoint_step"] in range(5, 60, 5)  # the last complete one before the kill landed
    resumed = run_data_parallel(CONFIG, 60, folder=tmp_path / "killed", every=5)
    assert resumed["resumed_from"] == killed["checkpoint_step"]
    assert np.array_equal(resumed["theta"], whole["theta"])
    assert resumed["losses"] == whole["losses"][killed["checkpoint_step"]:]


def test_checkpoint_round_trips_and_a_torn_one_is_refused(tmp_path):
    state, _ = train(CONFIG, 3)
    checkpoint.save_run(tmp_path, state, CONFIG, write_atomic)
    loaded = checkpoint.load_run(tmp_path, CONFIG)
    assert loaded.step == 3 and all(np.array_equal(getattr(loaded, k), getattr(state, k)) for k in "theta m v".split())
    data = (tmp_path / checkpoint.CHECKPOINT_NAME).read_bytes()

    def dies_halfway(path, chunks):  # what an unsafe writer leaves when the job is killed mid-write
        chunks = list(chunks)
        write_in_place(path, iter(chunks[: len(chunks) // 2]))

    dies_halfway(tmp_path / checkpoint.CHECKPOINT_NAME, iter([data[:100_000], data[100_000:]]))
    with pytest.raises(checkpoint.TornCheckpoint, match="torn"):
        checkpoint.load_run(tmp_path, CONFIG)
    other = RunConfig(model=CONFIG.model, batch_size=9, lr=CONFIG.lr)
    checkpoint.save_run(tmp_path, fresh_run(other), other, write_atomic)
    with pytest.raises(ValueError, match="another configuration"):
        checkpoint.load_run(tmp_path, CONFIG)
