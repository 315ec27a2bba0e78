"""Does the MPI launcher start real ranks (MPICH or Open MPI, as root too), and does the ring agree?"""

import stat
import sys
from pathlib import Path

import pytest

from mlsys_lab.collectives import launch

needs_mpi = pytest.mark.skipif(launch.find_mpiexec() is None, reason="no mpiexec on this machine")


def _fake_mpiexec(tmp_path: Path, banner: str) -> str:
    script = tmp_path / "mpiexec"
    script.write_text(f"#!/bin/sh\necho '{banner}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.parametrize(
    ("banner", "flavor"),
    [
        ("mpiexec (OpenRTE) 4.1.6", "openmpi"),
        ("mpirun (Open MPI) 5.0.3", "openmpi"),
        ("HYDRA build details:", "mpich"),
        ("something else", "unknown"),
    ],
)
def test_flavor_is_read_from_version_banner(tmp_path, banner, flavor):
    assert launch.mpi_flavor(_fake_mpiexec(tmp_path, banner)) == flavor


def test_open_mpi_gets_oversubscribe_and_root_permission():
    command = launch.launch_command(
        "/x/mpiexec", "openmpi", 4, "mlsys_lab.collectives.mpi_ring", ["--sizes", "8"]
    )
    assert command[:4] == ["/x/mpiexec", "-n", "4", "--oversubscribe"]
    assert command[4:7] == [sys.executable, "-m", "mlsys_lab.collectives.mpi_ring"]
    assert "--oversubscribe" not in launch.launch_command("/x/mpiexec", "mpich", 4, "m", [])
    env = launch.child_environment({})
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


def test_missing_mpi_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(launch, "find_mpiexec", lambda: None)
    with pytest.raises(launch.MpiUnavailable, match="pip install mpich mpi4py"):
        launch.ring_benchmark(2, [4096])
    assert "simulation" in launch.mpi_status()


def test_bad_process_count_is_named():
    with pytest.raises(ValueError, match="n_procs"):
        launch.launch_command("/x/mpiexec", "mpich", 0, "m", [])


@needs_mpi
@pytest.mark.parametrize("n_procs", [2, 4])
def test_course_ring_matches_mpi_allreduce(n_procs):
    """On real processes: same numbers as MPI.Allreduce (to float32 rounding), uneven chunk sizes included."""
    result = launch.ring_benchmark(n_procs, [4096, 4 * 12345], repeat=3, budget_s=0.2, timeout_s=60)
    assert result["n_ranks"] == n_procs
    assert [row["n_bytes"] for row in result["results"]] == [4096, 4 * 12345]
    for row in result["results"]:
        assert row["max_rel_error"] < 1e-5
        assert row["ring_seconds"] > 0 and row["mpi_seconds"] > 0


@needs_mpi
def test_nccl_runner_explains_itself_without_a_gpu():
    """Without CuPy the NCCL runner starts, says why it cannot run, and exits cleanly."""
    pytest.importorskip("mpi4py")
    from mlsys_lab import backend

    if backend.on_gpu:
        pytest.skip("a GPU is present: the runner would run for real")
    result = launch.nccl_benchmark(1, [4096], timeout_s=60)
    assert "no GPU backend" in result["error"]


def test_local_rank_comes_from_the_launcher(monkeypatch):
    from mlsys_lab.collectives import nccl_ring

    for name in nccl_ring.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert nccl_ring.local_rank() == 0
    monkeypatch.setenv("MPI_LOCALRANKID", "3")
    assert nccl_ring.local_rank() == 3
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5")
    assert nccl_ring.local_rank() == 5
