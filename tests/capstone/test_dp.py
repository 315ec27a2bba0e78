"""Data parallelism over real MPI ranks: the run ends where one process ends on the same global batches."""

import numpy as np
import pytest

from mlsys_lab.capstone.dp import LocalGroup, MpiNetwork, average_gradients, ring_allreduce_on_ranks
from mlsys_lab.capstone.launch import run_data_parallel
from mlsys_lab.capstone.model import GPTConfig
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.collectives.network import Network
from mlsys_lab.mpi import find_mpiexec

SMALL = GPTConfig(d_model=32, n_heads=2, n_layers=2, context=32)

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")


def test_average_gradients_weights_each_rank_by_its_tokens():
    grads = [{"w": np.array([1.0, 2.0]), "b": np.array([0.5])}, {"w": np.array([4.0, 8.0]), "b": np.array([-1.5])}]
    group = LocalGroup(2)
    out = average_gradients(grads, [3, 1], group)
    assert group.calls == 1
    for rank in out:
        assert np.allclose(rank["w"], [1.75, 3.5]) and np.allclose(rank["b"], [0.0])


def test_course_ring_with_the_exercise_signature_sums_on_a_simulated_network():
    buffers = [np.arange(7.0) * (r + 1) for r in range(3)]
    assert all(np.array_equal(out, np.arange(7.0) * 6) for out in ring_allreduce_on_ranks(buffers, Network(3)))


def test_mpi_network_refuses_two_messages_from_one_rank():
    class FakeComm:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 3

    with pytest.raises(ValueError, match="one of each"):
        MpiNetwork(FakeComm()).exchange([(0, 1, np.ones(2)), (0, 2, np.ones(2))])


@needs_mpi
def test_dp_float64_equals_one_process_on_the_same_batches(piece_store):
    config = RunConfig(model=GPTConfig(**{**SMALL.__dict__, "dtype": "float64"}), batch_size=7, lr=1e-2)
    parallel = run_data_parallel(config, 6, n_ranks=2)
    state, log = train(config, 6)
    assert parallel["rank_tokens"] == [4 * 32, 3 * 32]  # uneven shards: the weighting matters
    assert np.allclose(parallel["theta"], state.theta, rtol=0, atol=1e-12)
    assert np.allclose(parallel["losses"], log.losses, rtol=1e-12)
    assert parallel["pieces"]["ring_allreduce"] == "the course's" and parallel["allreduce_calls"] == 6


@needs_mpi
def test_dp_float32_stays_within_float32_tolerance_on_three_ranks(piece_store):
    config = RunConfig(model=SMALL, batch_size=8, lr=1e-2)
    parallel = run_data_parallel(config, 5, n_ranks=3)
    state, log = train(config, 5)
    assert np.abs(parallel["theta"] - state.theta).max() < 1e-4
    assert np.allclose(parallel["losses"], log.losses, rtol=1e-5)


@needs_mpi
def test_zero1_shards_adams_state_and_ends_where_one_process_ends(piece_store):
    config = RunConfig(model=GPTConfig(**{**SMALL.__dict__, "dtype": "float64"}), batch_size=7, lr=1e-2)
    sharded = run_data_parallel(config, 6, n_ranks=3, zero1=True)
    state, log = train(config, 6)
    assert sharded["zero1"] and np.allclose(sharded["theta"], state.theta, rtol=0, atol=1e-12)
    assert np.allclose(sharded["losses"], log.losses, rtol=1e-12)
    full = 2 * state.theta.nbytes
    assert sum(sharded["optimizer_state_bytes"]) == full and max(sharded["optimizer_state_bytes"]) <= full / 3 + 16
