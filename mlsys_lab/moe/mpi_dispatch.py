"""Expert parallelism over real MPI processes: all-to-all dispatch, local experts, all-to-all combine.

Run it under mpiexec (``mlsys_lab.mpi.run_mpi("mlsys_lab.moe.mpi_dispatch", P, [...])`` does)::

    mpiexec -n 2 python -m mlsys_lab.moe.mpi_dispatch --tokens 256 --experts 8 --top-k 2

Every rank builds the same router and experts from one seed and its own tokens from its rank.
Rank r owns experts [r·n/P, (r+1)·n/P). Each rank routes its tokens (top-k,
:func:`mlsys_lab.moe.gating.top_k_gating`), sorts the (token, choice)
pairs by destination rank, exchanges the counts (``Alltoall``) and then the token vectors
(``Alltoallv``), runs its experts on what it received, and sends the results back the same way.
The layer's output is checked against :func:`mlsys_lab.kernels.moe.expert_ffn.moe_ffn_loop` run locally on all
the experts, and the dispatch is timed (slowest rank, median). Rank 0 prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from mlsys_lab.kernels.moe.expert_ffn import moe_ffn_loop
from mlsys_lab.moe.gating import top_k_gating
from mlsys_lab.validation import max_relative_error


def _layer(seed: int, n_experts: int, d_model: int, d_ff: int):
    g = np.random.default_rng(seed)
    w_gate = g.normal(size=(d_model, n_experts))
    w1 = g.normal(0, d_model**-0.5, size=(n_experts, d_model, d_ff))
    w2 = g.normal(0, d_ff**-0.5, size=(n_experts, d_ff, d_model))
    return w_gate, w1, w2


def alltoallv(comm, send: np.ndarray, send_counts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Exchange rows: send_counts[j] rows go to rank j. Returns (received rows, rows from each rank)."""
    recv_counts = np.empty_like(send_counts)
    comm.Alltoall(send_counts, recv_counts)                              # first the sizes, then the data
    recv = np.empty((int(recv_counts.sum()), width), dtype=send.dtype)
    comm.Alltoallv([send, send_counts * width], [recv, recv_counts * width])
    return recv, recv_counts


def expert_parallel_layer(comm, x, w_gate, w1, w2, top_k: int, timings: list | None = None):
    """This rank's output of the MoE layer, computed with its share of the experts."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    per_rank = w1.shape[0] // size
    idx, gate = top_k_gating(x @ w_gate, top_k)
    tokens, choices = np.nonzero(np.ones_like(idx, dtype=bool))             # every (token, choice) pair
    experts = idx[tokens, choices]
    order = np.argsort(experts // per_rank, kind="stable")                  # group by destination rank
    tokens, choices, experts = tokens[order], choices[order], experts[order]
    send_counts = np.bincount(experts // per_rank, minlength=size).astype(np.int64)
    comm.Barrier()
    start = MPI.Wtime()
    recv_x, recv_counts = alltoallv(comm, np.ascontiguousarray(x[tokens]), send_counts, x.shape[1])
    recv_e, _ = alltoallv(comm, experts[:, None].astype(np.int64), send_counts, 1)
    if timings is not None:
        timings.append(comm.allreduce(MPI.Wtime() - start, op=MPI.MAX))
    local = recv_e[:, 0] - rank * per_rank                                  # which of my experts
    out_rows = np.zeros_like(recv_x)
    for e in range(per_rank):
        rows = np.nonzero(local == e)[0]
        out_rows[rows] = np.maximum(recv_x[rows] @ w1[rank * per_rank + e], 0) @ w2[rank * per_rank + e]
    back, _ = alltoallv(comm, out_rows, recv_counts, x.shape[1])             # combine: the reverse exchange
    y = np.zeros_like(x)
    np.add.at(y, tokens, gate[tokens, choices][:, None] * back)
    return y


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens per rank")
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--d-ff", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.experts % size:
        raise SystemExit(f"--experts must be divisible by the number of processes {size}; got {args.experts}")
    w_gate, w1, w2 = _layer(0, args.experts, args.d_model, args.d_ff)
    x = np.random.default_rng(100 + rank).normal(size=(args.tokens, args.d_model))
    timings: list[float] = []
    for _ in range(args.repeat):
        y = expert_parallel_layer(comm, x, w_gate, w1, w2, args.top_k, timings)
    idx, gate = top_k_gating(x @ w_gate, args.top_k)
    reference = moe_ffn_loop(x, idx, gate, w1, w2)                           # all experts, on this rank
    error = comm.allreduce(max_relative_error(y, reference), op=MPI.MAX)
    if rank == 0:
        print(json.dumps({"n_ranks": size, "tokens_per_rank": args.tokens, "n_experts": args.experts,
                          "top_k": args.top_k, "d_model": args.d_model, "max_rel_error": error,
                          "dispatch_seconds": statistics.median(timings[1:] or timings),
                          "dispatch_bytes_per_rank": args.tokens * args.top_k * args.d_model * 8}))


if __name__ == "__main__":
    main()
