"""Do the lesson's runners go through the one MPI launcher, and say how to get MPI when there is none?"""

import pytest

from mlsys_lab import mpi
from mlsys_lab.collectives import launch


def test_missing_mpi_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(mpi, "find_mpiexec", lambda: None)
    with pytest.raises(mpi.MpiUnavailable, match="pip install mpich mpi4py"):
        launch.ring_benchmark(2, [4096])
    with pytest.raises(mpi.MpiUnavailable):
        launch.nccl_benchmark(1, [4096])


def test_bad_sizes_are_named_before_anything_starts():
    with pytest.raises(ValueError, match="n_bytes"):
        launch.ring_benchmark(2, [2])
    with pytest.raises(ValueError, match="n_gpus"):
        launch.nccl_benchmark(0, [4096])

