"""Runner: the capstone's transformer in a two-stage pipeline on 2 MPI ranks, in the learner's 1F1B order.

Started through :func:`mlsys_lab.capstone.launch.run_pipeline` (``mlsys_lab.mpi.run_mpi``)::

    mpiexec -n 2 python -m mlsys_lab.capstone.pp_run --config '{...}' --steps 6 --microbatches 4 --out theta.npy

Every rank looks its pieces up (yours, else the course's), the schedule among them (``one_f_one_b``, lesson 08),
and checks the schedule's orders (:func:`~mlsys_lab.capstone.pipeline.validate_orders`) before it runs any op: a
malformed or deadlocking order ends the job with its message. Then, per step, each rank runs its stage's op list
on the step's global batch (:class:`~mlsys_lab.capstone.pipeline.PipelineStage`) and takes Adam's step on its own
slice of θ: a stage never reads the other stage's parameters, so the slices are exchanged (all-gathered) once, at
the end of the run, after which θ is the same on both ranks. Rank 0 saves θ to ``--out`` and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from mlsys_lab import pieces
from mlsys_lab.capstone.dp_run import abort_on_failure
from mlsys_lab.capstone.pipeline import N_STAGES, PipelineStage, checked_orders, course_one_f_one_b
from mlsys_lab.capstone.stack import PIPELINE_PIECES, Stack, load_stack
from mlsys_lab.capstone.text import global_batch
from mlsys_lab.capstone.train import RunConfig, adam_update, fresh_run, splits


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="RunConfig as JSON")
    parser.add_argument("--steps", type=int, required=True, help="how many steps to train")
    parser.add_argument("--microbatches", type=int, default=4, help="micro-batches per global batch")
    parser.add_argument("--out", required=True, help="where rank 0 saves the final θ (.npy)")
    parser.add_argument("--course-pieces", action="store_true", help="run the course's pieces, not the learner's")
    return parser


def main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    args = _arguments().parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != N_STAGES:
        raise ValueError(f"the pipeline has {N_STAGES} stages, one per rank: run it on {N_STAGES} ranks; got {size}")
    config = RunConfig.from_dict(json.loads(args.config))
    m = args.microbatches
    if not 1 <= m <= config.batch_size:
        raise ValueError(f"microbatches must be in [1, batch_size={config.batch_size}]; got {m}")
    stack = Stack.course() if args.course_pieces else load_stack(quiet=True)
    schedule = course_one_f_one_b if args.course_pieces else \
        pieces.piece("one_f_one_b", course=course_one_f_one_b, quiet=True)
    orders = checked_orders(schedule, m)  # on every rank, before any op runs
    stage = PipelineStage(rank, config.model, stack.ops, comm)
    state, (tokens, _) = fresh_run(config), splits()
    losses, seconds, last = [], [], None
    for _ in range(args.steps):
        x, y = global_batch(tokens, state.step, config.batch_size, config.model.context, config.data_seed)
        comm.Barrier()  # both timelines start together
        tick = time.perf_counter()
        last = stage.step(state.theta, x, y, orders[rank], m)
        adam_update(state, last.grad[stage.part], config.lr, part=stage.part)
        state.step += 1
        seconds.append(time.perf_counter() - tick)
        if rank == 1:
            losses.append(float(np.mean(last.losses)))
    state.theta[...] = np.concatenate(comm.allgather(state.theta[stage.part]))  # stage 0's slice, then stage 1's
    losses = comm.bcast(losses, root=1)
    peaks = comm.gather(last.peak_stashed if last else 0, root=0)
    timelines = comm.gather(last.timeline if last else [], root=0)
    seconds = comm.gather(seconds, root=0)
    if rank == 0:
        np.save(args.out, state.theta)
        whose = {name: who for name, who in stack.whose.items() if name in PIPELINE_PIECES}
        print(json.dumps({
            "n_ranks": size, "steps": state.step, "microbatches": m, "losses": losses,
            "schedule": "the course's" if schedule is course_one_f_one_b else "yours", "orders": orders,
            "peak_stashed": peaks, "stash_bound": [min(N_STAGES - d, m) for d in range(N_STAGES)],
            "timeline": timelines, "seconds_per_step": [float(np.mean(s)) if s else 0.0 for s in seconds],
            "pieces": whose, "out": args.out,
        }))


if __name__ == "__main__":
    abort_on_failure(main)
