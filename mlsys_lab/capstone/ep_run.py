"""Runner: the capstone's MoE model with its experts sharded over real MPI ranks, on the learner's ``ep_dispatch``.

Started through :func:`mlsys_lab.capstone.launch.run_expert_parallel` (``mlsys_lab.mpi.run_mpi``)::

    mpiexec -n 2 python -m mlsys_lab.capstone.ep_run --config '{...}' --steps 6 --out theta.npy [--course-pieces]

Every rank looks its pieces up (yours, else the course's), checks the config
(:func:`~mlsys_lab.capstone.ep.check_expert_parallel`) and ``ep_dispatch`` on simulated ranks
(:func:`~mlsys_lab.capstone.ep.checked_dispatch`), and starts from the run's θ with the experts it does not own set
to NaN (:mod:`.ep`: they live on their owner only). Per step, on its own rows of the global batch: the loss and the
gradient with every MoE block expert-parallel (:class:`~mlsys_lab.capstone.ep.ExpertParallelMoe`); the replicated
parameters' gradients averaged by ``average_gradients`` (its own at its own index, NaN stand-ins for the ranks it
cannot see; ``ring_allreduce`` over MPI, as in :mod:`.dp_run`); its experts' gradients kept as they come (already
the global batch's); Adam on all of it (a NaN expert stays NaN: its gradient here is 0). At the end rank 0 gathers
every rank's experts into one θ, checks that the replicated parameters agree on every rank, saves θ to ``--out``
and prints one JSON line: losses, rank 0's seconds per step, all-to-all payload bytes sent per step (rank 0, and
every rank's mean), metadata bytes, (token, expert) pairs dropped at capacity per step, each dispatch's all_to_all
calls, and whose pieces ran.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from mlsys_lab.capstone.dp import MpiGroup
from mlsys_lab.capstone.dp_run import abort_on_failure
from mlsys_lab.capstone.ep import ExpertParallelMoe, check_expert_parallel, checked_dispatch, sharded_names
from mlsys_lab.capstone.model import loss_and_grad, param_layout, views
from mlsys_lab.capstone.stack import EXPERT_PARALLEL_PIECES, Stack, load_stack
from mlsys_lab.capstone.text import global_batch, shard_rows
from mlsys_lab.capstone.train import RunConfig, adam_update, fresh_run, splits


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="RunConfig as JSON (its model with experts)")
    parser.add_argument("--steps", type=int, required=True, help="how many steps to train")
    parser.add_argument("--out", required=True, help="where rank 0 saves the final θ (.npy)")
    parser.add_argument("--course-pieces", action="store_true", help="run the course's pieces, not the learner's")
    return parser


def _gather_theta(comm, w: dict, names: list[str], per: int) -> None:
    """Every rank's experts into rank 0's views ``w`` (the other ranks' views stay as they are)."""
    rank = comm.Get_rank()
    parts = comm.gather({name: w[name][rank * per:(rank + 1) * per] for name in names}, root=0)
    if rank == 0:
        for r, part in enumerate(parts):
            for name in names:
                w[name][r * per:(r + 1) * per] = part[name]


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    args = _arguments().parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    config = check_expert_parallel(RunConfig.from_dict(json.loads(args.config)), size)
    model = config.model
    stack = Stack.course() if args.course_pieces else load_stack(quiet=True)
    checked_dispatch(stack.ep_dispatch)                                     # on every rank, before any step
    rows = shard_rows(config.batch_size, size)
    rank_tokens = [len(r) * model.context for r in rows]
    moe = ExpertParallelMoe(comm, model, stack.ops, stack.ep_dispatch, rank_tokens)
    group = MpiGroup(comm, stack.ring_allreduce)
    state, (tokens, _) = fresh_run(config), splits()
    w, sharded = views(state.theta, model), sharded_names(model)
    foreign = np.ones(model.moe.n_experts, dtype=bool)
    foreign[moe.first:moe.first + moe.per] = False
    for name in sharded:
        w[name][foreign] = np.nan                                           # not this rank's: never read here
    replicated = [(name, shape) for name, shape in param_layout(model) if name not in sharded]
    stand_in = {name: np.full(shape, np.nan, dtype=model.dtype) for name, shape in replicated}
    losses, seconds, counts = [], [], []
    comm.Barrier()
    for _ in range(args.steps):
        x, y = global_batch(tokens, state.step, config.batch_size, model.context, config.data_seed)
        tick = time.perf_counter()
        loss, grad = loss_and_grad(state.theta, x[rows[rank]], y[rows[rank]], model, stack.ops, mlp=moe.mlp,
                                   mlp_back=moe.mlp_back)
        g = views(grad, model)
        own = {name: g[name] for name, _ in replicated}
        averaged = stack.average_gradients([own if q == rank else stand_in for q in range(size)], rank_tokens,
                                           group)[rank]
        for name, _ in replicated:
            g[name][...] = averaged[name]
        adam_update(state, grad, config.lr)
        state.step += 1
        seconds.append(time.perf_counter() - tick)
        counts.append(moe.reset())
        losses.append(comm.allreduce(loss * rank_tokens[rank]) / sum(rank_tokens))  # for the log: MPI's own
    _gather_theta(comm, w, sharded, moe.per)
    replicas = comm.gather(np.concatenate([w[name].reshape(-1) for name, _ in replicated]), root=0)
    bytes_per_rank = comm.gather(float(np.mean([c["alltoall_bytes"] for c in counts])) if counts else 0.0, root=0)
    if rank == 0:
        np.save(args.out, state.theta)
        print(json.dumps({
            "n_ranks": size, "steps": state.step, "losses": losses, "rank_tokens": rank_tokens,
            "experts_per_rank": moe.per, "seconds_per_step": seconds,
            "step_seconds": float(np.median(seconds)) if seconds else 0.0,
            "alltoall_bytes_per_step": [c["alltoall_bytes"] for c in counts],
            "alltoall_bytes_per_rank": bytes_per_rank,
            "metadata_bytes_per_step": [c["metadata_bytes"] for c in counts],
            "alltoall_seconds_per_step": [c["seconds"] for c in counts],
            "dropped_per_step": [c["dropped"] for c in counts], "pairs_per_step": [c["pairs"] for c in counts],
            "dispatch_calls": [c["calls"] for c in counts],
            "replica_gap": float(max(np.max(np.abs(r - replicas[0])) for r in replicas)),
            "pieces": {name: whose for name, whose in stack.whose.items() if name in EXPERT_PARALLEL_PIECES},
            "out": args.out,
        }))


if __name__ == "__main__":
    abort_on_failure(main)
