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


@needs_mpi
@pytest.mark.parametrize("kill_rank", [1, 0])
def test_killed_zero1_run_resumes_from_every_ranks_shards_bitwise_equal(tmp_path, piece_store, kill_rank):
    for name in ("whole", "killed"):
        (tmp_path / name).mkdir()
    whole = run_data_parallel(CONFIG, 30, folder=tmp_path / "whole", every=5, zero1=True)
    assert whole["checkpoints"] == list(range(5, 31, 5)) and checkpoint.zero1_manifest(tmp_path / "whole")["step"] == 30
    assert sorted(p.name for p in (tmp_path / "whole").glob("zero1-step*")) == [
        checkpoint.shard_path(tmp_path, 30, r).name for r in range(2)]  # older steps' shards removed after commit
    killed = run_and_kill(CONFIG, 30, tmp_path / "killed", kill_rank=kill_rank, kill_at_step=8, every=5,
                          zero1=True)
    assert killed["exit_code"] != 0 and killed["checkpoint_step"] in range(5, 30, 5)
    resumed = run_data_parallel(CONFIG, 30, folder=tmp_path / "killed", every=5, zero1=True)
    assert resumed["resumed_from"] == killed["checkpoint_step"]
    assert np.array_equal(resumed["theta"], whole["theta"])
    assert resumed["losses"] == whole["losses"][killed["checkpoint_step"]:]


def test_zero1_resume_trusts_only_a_step_whose_every_shard_is_there_and_agrees(tmp_path):
    n_ranks, theta = 2, fresh_run(CONFIG).theta
    halves = np.array_split(np.arange(theta.size, dtype=theta.dtype), n_ranks)

    def write_step(step):
        shards = [checkpoint.Zero1Shard(theta, halves[r] * step, halves[r], step) for r in range(n_ranks)]
        digests = [checkpoint.save_zero1_shard(tmp_path, shards[r], r, n_ranks, CONFIG, write_atomic)
                   for r in range(n_ranks)]
        checkpoint.commit_zero1(tmp_path, step, digests, CONFIG, write_atomic)

    assert checkpoint.load_zero1(tmp_path, CONFIG, 0, n_ranks) is None
    write_step(5)
    checkpoint.save_zero1_shard(tmp_path, checkpoint.Zero1Shard(theta, halves[0], halves[0], 10), 0, n_ranks, CONFIG,
                                write_atomic)  # the job died before rank 1's shard of step 10 and the manifest
    shard = checkpoint.load_zero1(tmp_path, CONFIG, 1, n_ranks)
    assert shard.step == 5 and np.array_equal(shard.m, halves[1] * 5) and np.array_equal(shard.theta, theta)
    write_step(10)
    assert not checkpoint.shard_path(tmp_path, 5, 0).exists()
    checkpoint.shard_path(tmp_path, 10, 1).unlink()
    with pytest.raises(checkpoint.TornCheckpoint, match="rank 1 of step 10 is missing"):
        checkpoint.load_zero1(tmp_path, CONFIG, 0, n_ranks)
    checkpoint.save_zero1_shard(tmp_path, checkpoint.Zero1Shard(theta, halves[1], halves[1], 10), 1, n_ranks, CONFIG,
                                write_atomic)  # a shard of step 10, but not the one the manifest committed
    with pytest.raises(checkpoint.TornCheckpoint, match="does not match the manifest"):
        checkpoint.load_zero1(tmp_path, CONFIG, 0, n_ranks)
    with pytest.raises(ValueError, match="written by 2 ranks"):
        checkpoint.load_zero1(tmp_path, CONFIG, 0, 3)
