"""Start this lesson's runners on P processes: the course's ring vs ``MPI.Allreduce`` and vs NCCL.

Both go through the one MPI launcher, :func:`mlsys_lab.mpi.run_mpi`, which finds ``mpiexec`` (MPICH or
Open MPI, root too) and reads back rank 0's JSON line.
"""

from __future__ import annotations

from mlsys_lab.mpi import run_mpi
from mlsys_lab.validation import check_int

__all__ = ["nccl_benchmark", "ring_benchmark"]


def _sizes_argument(sizes_bytes: list[int]) -> str:
    return ",".join(str(check_int("n_bytes", int(s), low=4)) for s in sizes_bytes)


def ring_benchmark(
    n_procs: int, sizes_bytes: list[int], repeat: int = 10, budget_s: float = 1.0, timeout_s: float = 120.0
) -> dict:
    """The course's ring all-reduce vs ``MPI.Allreduce`` over MPI (see :mod:`.mpi_ring`)."""
    args = ["--sizes", _sizes_argument(sizes_bytes), "--repeat", str(check_int("repeat", repeat, low=1)),
            "--budget-s", str(budget_s)]
    return run_mpi("mlsys_lab.collectives.mpi_ring", n_procs, args, timeout_s)


def nccl_benchmark(n_gpus: int, sizes_bytes: list[int], repeat: int = 20, timeout_s: float = 300.0) -> dict:
    """The course's ring on NCCL vs NCCL's all-reduce, one process per GPU (see :mod:`.nccl_ring`).

    The result carries ``error`` instead of ``results`` when the processes found no usable GPU.
    """
    args = ["--sizes", _sizes_argument(sizes_bytes), "--repeat", str(check_int("repeat", repeat, low=1))]
    return run_mpi("mlsys_lab.collectives.nccl_ring", check_int("n_gpus", n_gpus, low=1), args, timeout_s)
