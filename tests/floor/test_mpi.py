"""Does the one MPI launcher find mpiexec, speak to MPICH and Open MPI (as root too), and read rank 0's line?"""

import stat
import sys
from pathlib import Path

import pytest

from mlsys_lab import mpi

needs_mpi = pytest.mark.skipif(mpi.find_mpiexec() is None, reason="no mpiexec on this machine")

RANK_SUM = """\
import json
from mpi4py import MPI

world = MPI.COMM_WORLD
total = world.allreduce(world.Get_rank())
if world.Get_rank() == 0:
    print(json.dumps({"n_ranks": world.Get_size(), "rank_sum": total}))
"""


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
    assert mpi.mpi_flavor(_fake_mpiexec(tmp_path, banner)) == flavor


def test_open_mpi_gets_oversubscribe_and_root_permission():
    command = mpi.launch_command("/x/mpiexec", "openmpi", 4, "mlsys_lab.collectives.mpi_ring", ["--sizes", "8"])
    assert command[:4] == ["/x/mpiexec", "-n", "4", "--oversubscribe"]
    assert command[4:7] == [sys.executable, "-m", "mlsys_lab.collectives.mpi_ring"]
    assert "--oversubscribe" not in mpi.launch_command("/x/mpiexec", "mpich", 4, "m", [])
    env = mpi.child_environment({})
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    assert mpi.child_environment({}, {"MLSYS_LAB_BACKEND": "numpy"})["MLSYS_LAB_BACKEND"] == "numpy"


def test_missing_mpi_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(mpi, "find_mpiexec", lambda: None)
    with pytest.raises(mpi.MpiUnavailable, match="pip install mpich mpi4py"):
        mpi.run_mpi("any.module", 2, [])
    assert "simulation" in mpi.mpi_status()


def test_bad_process_count_and_timeout_are_named():
    with pytest.raises(ValueError, match="n_procs"):
        mpi.launch_command("/x/mpiexec", "mpich", 0, "m", [])
    with pytest.raises(ValueError, match="timeout_s"):
        mpi.run_mpi("m", 2, [], timeout_s=0)


@needs_mpi
def test_run_mpi_returns_rank_0s_line_from_one_communicator(tmp_path):
    """Two processes join one communicator: the sum of their ranks is 0 + 1 = 1."""
    pytest.importorskip("mpi4py")
    (tmp_path / "rank_sum.py").write_text(RANK_SUM)
    result = mpi.run_mpi("rank_sum", 2, [], timeout_s=60, env={"PYTHONPATH": str(tmp_path)})
    assert result == {"n_ranks": 2, "rank_sum": 1}


@needs_mpi
def test_a_failing_module_raises_with_its_stderr(tmp_path):
    (tmp_path / "broken.py").write_text("raise SystemExit('broken on purpose')\n")
    with pytest.raises(RuntimeError, match="broken on purpose"):
        mpi.run_mpi("broken", 2, [], timeout_s=60, env={"PYTHONPATH": str(tmp_path)})


@needs_mpi
def test_a_ranks_failure_line_survives_a_long_traceback_after_it(tmp_path):
    """Both ranks fail: rank 1 says so in its one line, then rank 0's long traceback fills the tail of stderr."""
    (tmp_path / "both_fail.py").write_text(
        "import sys, time\nfrom mpi4py import MPI\nrank = MPI.COMM_WORLD.Get_rank()\n"
        "if rank == 1:\n    print('rank 1 failed: ValueError: the budget', file=sys.stderr, flush=True)\n"
        "    sys.exit(1)\n"
        "time.sleep(1)\nprint('x' * 3000, file=sys.stderr, flush=True)\nsys.exit(1)\n")
    with pytest.raises(RuntimeError, match="^rank 1 failed: ValueError: the budget") as failure:
        mpi.run_mpi("both_fail", 2, [], timeout_s=60, env={"PYTHONPATH": str(tmp_path)})
    assert "x" * 1000 in str(failure.value)  # the tail is still there
