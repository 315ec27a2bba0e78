"""Runner: the capstone's data-parallel training on real MPI ranks, with checkpoints and resume.

Started through :func:`mlsys_lab.capstone.launch.run_data_parallel` (``mlsys_lab.mpi.run_mpi``)::

    mpiexec -n 2 python -m mlsys_lab.capstone.dp_run --config '{...}' --steps 40 --out theta.npy \\
        [--folder DIR --every 5]

Every rank looks its pieces up (yours, else the course's), resumes from ``DIR/ckpt.bin`` when there is one, and
for each step: takes the step's global batch and its own rows of it, computes the loss and gradient of its rows,
averages the gradients with ``average_gradients(rank_grads, rank_tokens, group)`` (its own gradient at its own
index, NaN stand-ins for the ranks it cannot see; ``group.all_reduce`` runs ``ring_allreduce`` over MPI), and
takes the same Adam step as every other rank. Rank 0 writes a checkpoint every ``--every`` steps and after the
last, with the crash-safe writer piece, and its step number to ``DIR/progress`` (what a test watches to kill a
rank mid-run); every rank writes its process id to ``DIR/rank<r>.pid``. Rank 0 saves θ to ``--out`` and prints
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from mlsys_lab.capstone import checkpoint
from mlsys_lab.capstone.dp import MpiGroup
from mlsys_lab.capstone.model import flatten, loss_and_grad, param_layout, views
from mlsys_lab.capstone.stack import RANK_PIECES, Stack, load_stack
from mlsys_lab.capstone.text import global_batch, shard_rows
from mlsys_lab.capstone.train import RunConfig, adam_update, fresh_run, splits
from mlsys_lab.capstone.zero import Zero1Optimizer


def _write_small(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="RunConfig as JSON")
    parser.add_argument("--steps", type=int, required=True, help="train until this many steps are done")
    parser.add_argument("--out", required=True, help="where rank 0 saves the final θ (.npy)")
    parser.add_argument("--folder", default=None, help="checkpoints (and progress, pids) go here")
    parser.add_argument("--every", type=int, default=5, help="checkpoint every this many steps")
    parser.add_argument("--course-pieces", action="store_true", help="run the course's pieces, not the learner's")
    parser.add_argument("--zero1", action="store_true", help="ZeRO-1: Adam's state sharded over the ranks")
    args = parser.parse_args(argv)
    if args.zero1 and args.folder:
        parser.error("--zero1 keeps no checkpoints yet (each rank would write its own shard of m and v)")
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    config = RunConfig.from_dict(json.loads(args.config))
    model = config.model
    stack = Stack.course() if args.course_pieces else load_stack(quiet=True)
    folder = Path(args.folder) if args.folder else None
    if folder is not None:
        _write_small(folder / f"rank{rank}.pid", str(os.getpid()))
    state = checkpoint.load_run(folder, config) if folder is not None else None
    resumed_from = state.step if state is not None else None
    state = state or fresh_run(config)
    tokens, _ = splits()
    shards = shard_rows(config.batch_size, size)
    rows = shards[rank]
    rank_tokens = [len(s) * model.context for s in shards]
    n_tokens = sum(rank_tokens)
    group = MpiGroup(comm, stack.ring_allreduce)
    stand_in = {name: np.full(shape, np.nan, dtype=model.dtype) for name, shape in param_layout(model)}
    zero = Zero1Optimizer(comm, state.theta, config.lr, state.step) if args.zero1 else None
    if zero is not None:  # the full-size moments are not kept: only this rank's slice of them (in zero.shard)
        state.m = state.v = np.zeros(0, dtype=state.theta.dtype)
    losses, compute_s, checkpoint_s, checkpoints = [], 0.0, 0.0, []
    comm.Barrier()
    start = time.perf_counter()
    while state.step < args.steps:
        x, y = global_batch(tokens, state.step, config.batch_size, model.context, config.data_seed)
        tick = time.perf_counter()
        loss, grad = loss_and_grad(state.theta, x[rows], y[rows], model, stack.ops)
        compute_s += time.perf_counter() - tick
        if zero is not None:  # reduce-scatter, Adam on this rank's slice, all-gather
            tick = time.perf_counter()
            zero.step(grad, rank_tokens[rank], n_tokens)
            group.seconds += time.perf_counter() - tick
        else:
            rank_grads = [views(grad, model) if r == rank else stand_in for r in range(size)]
            averaged = stack.average_gradients(rank_grads, rank_tokens, group)[rank]
            tick = time.perf_counter()
            adam_update(state, flatten(averaged, model), config.lr)
            compute_s += time.perf_counter() - tick
        state.step += 1
        losses.append(comm.allreduce(loss * rank_tokens[rank]) / n_tokens)  # for the log: MPI's own all-reduce
        if folder is not None and rank == 0:
            if state.step % args.every == 0 or state.step == args.steps:
                tick = time.perf_counter()
                checkpoint.save_run(folder, state, config, stack.write_checkpoint)
                checkpoint_s += time.perf_counter() - tick
                checkpoints.append(state.step)
            _write_small(folder / "progress", str(state.step))
    seconds = time.perf_counter() - start
    comm_s, compute_all = comm.gather(group.seconds, root=0), comm.gather(compute_s, root=0)
    state_bytes = comm.gather(zero.state_bytes if zero else int(state.m.nbytes + state.v.nbytes), root=0)
    if rank == 0:
        np.save(args.out, state.theta)
        print(json.dumps({
            "n_ranks": size, "steps": state.step, "resumed_from": resumed_from, "losses": losses,
            "seconds": seconds, "compute_seconds": compute_all, "allreduce_seconds": comm_s,
            "checkpoint_seconds": checkpoint_s, "checkpoints": checkpoints, "rank_tokens": rank_tokens,
            "allreduce_calls": group.calls, "bytes_sent_rank0": group.net.bytes_sent,
            "pieces": {name: whose for name, whose in stack.whose.items() if name in RANK_PIECES},
            "out": args.out, "zero1": args.zero1,
            "optimizer_state_bytes": state_bytes,
        }))


def abort_on_failure(run) -> None:
    """Run ``run()``; a rank whose run raises prints its error and aborts the whole job (``MPI_Abort``): a rank
    that fails alone (rank 0 writing a checkpoint with a broken writer) must not leave the others waiting for it in
    an all-reduce until the launcher's time limit."""
    try:
        run()
    except Exception as exc:
        import sys
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        # the last line the launcher's message quotes: which rank, and what it raised, whole (a piece's failure ends
        # with the use_course call that switches it off)
        print(f"rank {MPI.COMM_WORLD.Get_rank()} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    abort_on_failure(main)
