"""Does the NCCL runner find its GPU from the launcher, and explain itself where there is none?"""

import subprocess
import sys

import pytest

from mlsys_lab import mpi
from mlsys_lab.collectives import launch, nccl_ring


@pytest.mark.skipif(mpi.find_mpiexec() is None, reason="no mpiexec on this machine")
def test_nccl_runner_explains_itself_without_a_gpu():
    """Without CuPy the NCCL runner starts, says why it cannot run, and exits cleanly."""
    pytest.importorskip("mpi4py")
    from mlsys_lab import backend

    if backend.on_gpu:
        pytest.skip("a GPU is present: the runner would run for real")
    result = launch.nccl_benchmark(1, [4096], timeout_s=60)
    assert "no GPU backend" in result["error"]


def test_local_rank_comes_from_the_launcher(monkeypatch):
    for name in nccl_ring.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert nccl_ring.local_rank() == 0
    monkeypatch.setenv("MPI_LOCALRANKID", "3")
    assert nccl_ring.local_rank() == 3
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5")
    assert nccl_ring.local_rank() == 5


def test_importing_the_lesson_package_takes_no_gpu():
    """``python -m mlsys_lab.collectives.nccl_ring`` imports the package first, then picks its GPU: the
    package must not start the array backend (which takes a device) or MPI."""
    code = ("import sys, mlsys_lab.collectives, mlsys_lab.collectives.nccl_ring; "
            "print(sorted(m for m in ('mlsys_lab.backend', 'cupy', 'mpi4py') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
