"""The course's ring all-reduce on MPI point-to-point, checked and timed against ``MPI.Allreduce``.

Run it under mpiexec (``mlsys_lab.collectives.launch.ring_benchmark`` does, through ``mlsys_lab.mpi.run_mpi``)::

    mpiexec -n 4 python -m mlsys_lab.collectives.mpi_ring --sizes 4096,1048576 --repeat 10

Each rank fills a float32 vector from its own seed, runs both all-reduces, and checks that they
agree (relative error: the summation order differs). Times: a barrier, then ``MPI.Wtime`` around one
call; the slowest rank's time is the collective's time; the median over repeats is reported. Rank 0
prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics

import numpy as np

from mlsys_lab.validation import max_relative_error


def ring_allreduce_mpi(comm, send: np.ndarray, out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """Sum ``send`` over all ranks into ``out`` with the ring schedule of :func:`simulate.ring_allreduce`.

    Reduce-scatter: p−1 ``Sendrecv`` rounds, rank r sends chunk (r − s) right and adds chunk
    (r − s − 1) received from the left. All-gather: p−1 rounds forwarding finished chunks.
    ``send``, ``out``: 1-D contiguous arrays of equal length.
    """
    p, r = comm.Get_size(), comm.Get_rank()
    out[...] = send
    if p == 1:
        return
    chunks = np.array_split(out, p)  # views into out
    right, left = (r + 1) % p, (r - 1) % p
    if scratch is None:
        scratch = np.empty(chunks[0].size, dtype=out.dtype)
    for step in range(p - 1):
        incoming = chunks[(r - step - 1) % p]
        received = scratch[: incoming.size]
        comm.Sendrecv(chunks[(r - step) % p], dest=right, recvbuf=received, source=left)
        np.add(incoming, received, out=incoming)
    for step in range(p - 1):
        comm.Sendrecv(chunks[(r + 1 - step) % p], dest=right, recvbuf=chunks[(r - step) % p], source=left)


def _time(comm, fn, repeat: int, budget_s: float) -> list[float]:
    from mpi4py import MPI

    samples, spent = [], 0.0
    while len(samples) < repeat and (len(samples) < 3 or spent < budget_s):
        comm.Barrier()
        start = MPI.Wtime()
        fn()
        slowest = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
        samples.append(slowest)
        spent += slowest
    return samples


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,1048576", help="comma-separated message sizes in bytes")
    parser.add_argument("--repeat", type=int, default=10, help="most timed runs per size")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--budget-s", type=float, default=1.0, help="stop timing a size after this (>= 3 runs)"
    )
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rows = []
    for n_bytes in (int(s) for s in args.sizes.split(",")):
        n = max(n_bytes // 4, 1)
        send = np.random.default_rng(1000 + rank).standard_normal(n).astype(np.float32)
        ours, theirs = np.empty_like(send), np.empty_like(send)
        scratch = np.empty(-(-n // size), dtype=np.float32)
        ring = lambda send=send, ours=ours, scratch=scratch: ring_allreduce_mpi(comm, send, ours, scratch)  # noqa: E731
        native = lambda send=send, theirs=theirs: comm.Allreduce(send, theirs, op=MPI.SUM)  # noqa: E731
        for _ in range(args.warmup):
            ring()
            native()
        error = comm.allreduce(max_relative_error(ours, theirs), op=MPI.MAX)
        ring_samples = _time(comm, ring, args.repeat, args.budget_s)
        mpi_samples = _time(comm, native, args.repeat, args.budget_s)
        rows.append(
            {
                "n_bytes": int(send.nbytes),
                "ring_seconds": statistics.median(ring_samples),
                "mpi_seconds": statistics.median(mpi_samples),
                "max_rel_error": error,
                "runs": len(ring_samples),
            }
        )
    if rank == 0:
        print(
            json.dumps(
                {
                    "n_ranks": size,
                    "library": " ".join(MPI.Get_library_version().replace("\x00", "").split("\n")[0].split()),
                    "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
                    "dtype": "float32",
                    "results": rows,
                }
            )
        )


if __name__ == "__main__":
    main()
