"""The course's ring all-reduce on NCCL point-to-point, checked and timed against NCCL's all-reduce.

One process per GPU, started by mpiexec (MPI only hands out ranks and the NCCL id)::

    mpiexec -n 8 python -m mlsys_lab.collectives.nccl_ring --sizes 1048576,268435456

Each process takes GPU ``local_rank`` (set through ``CUDA_VISIBLE_DEVICES`` before the backend
starts), opens a ``cupyx.distributed`` NCCL communicator, runs the same schedule as
:func:`mlsys_lab.collectives.simulate.ring_allreduce` with NCCL send/recv grouped per round, and
compares it with ``comm.all_reduce``. Times are CUDA-event times on the slowest rank (median of runs).
With one GPU the ring has no rounds: the run only proves that the communicator starts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from mlsys_lab.validation import max_relative_error

LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
)


def local_rank() -> int:
    """This process's index on its node, from the launcher's environment (0 when absent)."""
    for name in LOCAL_RANK_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def ring_allreduce_nccl(comm, nccl, xp, send, out, scratch, rank: int, n_ranks: int) -> None:
    """Ring all-reduce of ``send`` into ``out`` (CuPy 1-D arrays) with NCCL send/recv, one group per round."""
    out[...] = send
    if n_ranks == 1:
        return
    bounds = [len(out) * i // n_ranks for i in range(n_ranks + 1)]
    chunk = [out[bounds[i] : bounds[i + 1]] for i in range(n_ranks)]
    right, left = (rank + 1) % n_ranks, (rank - 1) % n_ranks
    for step in range(n_ranks - 1):
        incoming = chunk[(rank - step - 1) % n_ranks]
        received = scratch[: incoming.size]
        nccl.groupStart()
        comm.send(chunk[(rank - step) % n_ranks], right)
        comm.recv(received, left)
        nccl.groupEnd()
        xp.add(incoming, received, out=incoming)
    for step in range(n_ranks - 1):
        nccl.groupStart()
        comm.send(chunk[(rank + 1 - step) % n_ranks], right)
        comm.recv(chunk[(rank - step) % n_ranks], left)
        nccl.groupEnd()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1048576,67108864", help="comma-separated message sizes in bytes")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(local_rank()))
    from mpi4py import MPI

    from mlsys_lab import backend

    world = MPI.COMM_WORLD
    rank, n_ranks = world.Get_rank(), world.Get_size()
    if not backend.on_gpu:
        if rank == 0:
            print(json.dumps({"n_ranks": n_ranks, "error": f"no GPU backend: {backend.describe()}"}))
        return
    from cupyx.distributed import init_process_group  # lazily: only with the CuPy backend

    xp = backend.xp
    nccl = xp.cuda.nccl
    comm = init_process_group(n_ranks, rank, use_mpi=True)
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    rows = []
    for n_bytes in (int(s) for s in args.sizes.split(",")):
        n = max(n_bytes // 4, 1)
        send = xp.random.default_rng(1000 + rank).standard_normal(n, dtype=xp.float32)
        ours, theirs = xp.empty_like(send), xp.empty_like(send)
        scratch = xp.empty(-(-n // n_ranks), dtype=xp.float32)
        ring = lambda send=send, ours=ours, scratch=scratch: ring_allreduce_nccl(  # noqa: E731
            comm, nccl, xp, send, ours, scratch, rank, n_ranks
        )
        native = lambda send=send, theirs=theirs: comm.all_reduce(send, theirs, op="sum")  # noqa: E731
        timings = {}
        for label, fn in (("ring", ring), ("nccl", native)):
            for _ in range(args.warmup):
                fn()
            samples = []
            for _ in range(args.repeat):
                backend.sync()
                world.Barrier()
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                samples.append(world.allreduce(xp.cuda.get_elapsed_time(start, stop) / 1e3, op=MPI.MAX))
            timings[label] = statistics.median(samples)
        error = max_relative_error(ours, theirs)
        rows.append(
            {
                "n_bytes": int(send.nbytes),
                "ring_seconds": timings["ring"],
                "nccl_seconds": timings["nccl"],
                "max_rel_error": world.allreduce(error, op=MPI.MAX),
            }
        )
    if rank == 0:
        print(
            json.dumps(
                {
                    "n_ranks": n_ranks,
                    "device": backend.describe(),
                    "nccl_version": int(nccl.get_version()),
                    "dtype": "float32",
                    "results": rows,
                }
            )
        )


if __name__ == "__main__":
    main()
