"""Does expert parallelism over real MPI processes give the one-process layer's output?"""

import pytest

from mlsys_lab.mpi import MpiUnavailable, run_mpi


@pytest.mark.parametrize(("n_procs", "top_k"), [(2, 2), (4, 3)])
def test_expert_parallel_layer_over_mpi_matches_one_process(n_procs, top_k):
    try:
        args = ["--tokens", "32", "--experts", "8", "--top-k", str(top_k), "--repeat", "2"]
        result = run_mpi("mlsys_lab.moe.mpi_dispatch", n_procs, args)
    except MpiUnavailable as exc:
        pytest.skip(str(exc))
    assert result["n_ranks"] == n_procs
    assert result["max_rel_error"] < 1e-12
    assert result["dispatch_bytes_per_rank"] == 32 * top_k * 64 * 8
