"""Does the course's ring, on real MPI processes, give MPI.Allreduce's numbers, uneven chunks included?"""

import pytest

from mlsys_lab import mpi
from mlsys_lab.collectives import launch

needs_mpi = pytest.mark.skipif(mpi.find_mpiexec() is None, reason="no mpiexec on this machine")


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
