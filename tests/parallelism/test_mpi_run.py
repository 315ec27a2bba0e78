"""Do DP and TP across real MPI processes reproduce the single-process loss curve?"""

import numpy as np
import pytest

from mlsys_lab import mpi
from mlsys_lab.parallelism import mpi_run


@pytest.mark.slow
def test_mpi_training_matches_single_process():
    if mpi.find_mpiexec() is None:
        pytest.skip("no mpiexec on this machine (pip install mpi4py mpich)")
    reference = np.array(mpi_run.train_reference(5))
    for mode in ("dp", "tp"):
        result = mpi_run.run_mpi_training(mode, 2, 5)
        assert result["engine"].startswith("MPI"), result["engine"]
        assert result["n_ranks"] == 2 and len(result["seconds_per_step"]) == 5
        assert np.allclose(result["losses"], reference, rtol=1e-12, atol=1e-14)


def test_without_mpi_it_says_so_and_trains_in_one_process(monkeypatch, capsys):
    monkeypatch.setattr(mpi, "find_mpiexec", lambda: None)
    result = mpi_run.run_mpi_training("dp", 2, 3)
    assert result["engine"] == "single process (fallback)" and result["n_procs"] == 1
    assert result["losses"] == mpi_run.train_reference(3)
    assert "MPI unavailable (no mpiexec found" in capsys.readouterr().out
