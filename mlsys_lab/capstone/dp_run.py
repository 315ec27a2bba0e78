"""Runner: the capstone's data-parallel training on real MPI ranks, with checkpoints and resume.

Started through :func:`mlsys_lab.capstone.launch.run_data_parallel` (``mlsys_lab.mpi.run_mpi``)::

    mpiexec -n 2 python -m mlsys_lab.capstone.dp_run --config '{...}' --steps 40 --out theta.npy \\
        [--folder DIR --every 5] [--zero1] [--measure-memory]

Every rank looks its pieces up (yours, else the course's), resumes from ``DIR/ckpt.bin`` when there is one, and
for each step: takes the step's global batch and its own rows of it, computes the loss and gradient of its rows,
averages the gradients with ``average_gradients(rank_grads, rank_tokens, group)`` (its own gradient at its own
index, NaN stand-ins for the ranks it cannot see; ``group.all_reduce`` runs ``ring_allreduce`` over MPI), and
takes the same Adam step as every other rank. Rank 0 writes a checkpoint every ``--every`` steps and after the
last, with the crash-safe writer piece, and its step number to ``DIR/progress`` (what a test watches to kill a
rank mid-run); every rank writes its process id to ``DIR/rank<r>.pid``. Rank 0 saves θ to ``--out`` and prints
one JSON line.

With ``--zero1`` (:mod:`.zero`) each rank holds only its slice of Adam's m and v, so each rank writes its own
shard and rank 0 commits the step with a manifest written last (:mod:`.checkpoint`); a resume reads the manifest.

With ``--ddp-buckets`` (:mod:`.ddp`) the gradient goes in DDP's buckets, planned by the ``ddp_schedule`` piece
(lesson 08) from rank 0's measured layer seconds, and each bucket is all-reduced on a communication thread while
the backward goes on; the report's ``ddp`` holds the plan, whose schedule ran and each rank's last-step timeline.

``--measure-memory``: after the timed loop, one more step (forward, backward, all-reduce, Adam) runs on copies
of the state, once to warm up and once under ``tracemalloc``, with an MPI group of its own; the report then
holds each rank's ``peak_step_bytes`` and ``state_bytes``. tracemalloc slows every allocation, so it never runs
inside the timed loop: the reported seconds, calls and bytes sent are the loop's alone, the state it trains
is untouched. :mod:`.memory` holds the model these are compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_lab import pieces
from mlsys_lab.capstone import checkpoint
from mlsys_lab.capstone.ddp import (
    BUCKET_CAP_BYTES,
    FIRST_BUCKET_BYTES,
    checked_plan,
    ddp_step,
    fitted_allreduce,
    grad_layer_bytes,
    grad_layers,
    measure_layer_seconds,
)
from mlsys_lab.capstone.dp import MpiGroup
from mlsys_lab.capstone.model import GPTConfig, flatten, init_theta, loss_and_grad, param_layout, views
from mlsys_lab.capstone.stack import RANK_PIECES, Stack, load_stack
from mlsys_lab.capstone.text import global_batch, shard_rows
from mlsys_lab.capstone.train import RunConfig, TrainState, adam_update, fresh_run, splits
from mlsys_lab.capstone.zero import Zero1Optimizer
from mlsys_lab.parallelism.dp import ddp_bucket_schedule


def _write_small(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass
class _Rank:
    """What every step of this rank needs: its communicator, pieces, rows of the global batch, token counts."""

    comm: object
    stack: Stack
    model: GPTConfig
    lr: float
    rows: np.ndarray
    rank_tokens: list[int]

    def __post_init__(self) -> None:
        self.rank, self.size, self.n_tokens = self.comm.Get_rank(), self.comm.Get_size(), sum(self.rank_tokens)
        self.stand_in = {name: np.full(shape, np.nan, dtype=self.model.dtype)
                         for name, shape in param_layout(self.model)}


def _take_step(theta: np.ndarray, x, y, r: _Rank, group: MpiGroup, optimizer, clock: dict) -> tuple[float, int]:
    """One step of this rank on its rows of the global batch (x, y): loss and gradient, then the all-reduce and
    Adam (``optimizer`` a TrainState), or ZeRO-1's reduce-scatter, Adam on the slice and all-gather (a
    :class:`Zero1Optimizer`). Seconds go to ``clock['compute']`` and ``group.seconds``; returns the loss and the
    gradient's bytes."""
    tick = time.perf_counter()
    loss, grad = loss_and_grad(theta, x[r.rows], y[r.rows], r.model, r.stack.ops)
    clock["compute"] += time.perf_counter() - tick
    if isinstance(optimizer, Zero1Optimizer):
        tick = time.perf_counter()
        optimizer.step(grad, r.rank_tokens[r.rank], r.n_tokens)
        group.seconds += time.perf_counter() - tick
    else:
        rank_grads = [views(grad, r.model) if q == r.rank else r.stand_in for q in range(r.size)]
        averaged = r.stack.average_gradients(rank_grads, r.rank_tokens, group)[r.rank]
        tick = time.perf_counter()
        adam_update(optimizer, flatten(averaged, r.model), r.lr)
        clock["compute"] += time.perf_counter() - tick
    return loss, int(grad.nbytes)


def _ddp_setup(r: _Rank, theta: np.ndarray, x, y, course_pieces: bool) -> dict:
    """The bucket plan every rank runs: ``ddp_schedule`` (yours, else the course's) on rank 0's measured layer
    seconds (broadcast, so every rank plans the same buckets), checked on every rank before any step; and whether
    the all-reduces may overlap the backward (a thread other than the main one calls MPI: THREAD_SERIALIZED)."""
    from mpi4py import MPI

    schedule = ddp_bucket_schedule if course_pieces else \
        pieces.piece("ddp_schedule", course=ddp_bucket_schedule, quiet=True)
    seconds = r.comm.bcast(measure_layer_seconds(theta, x[r.rows], y[r.rows], r.model, r.stack.ops), root=0)
    sizes = grad_layer_bytes(r.model)
    plan = checked_plan(schedule, seconds, sizes, fitted_allreduce(r.size))
    level, reason = MPI.Query_thread(), None
    if level < MPI.THREAD_SERIALIZED:
        reason = (f"MPI's thread level is {level} (below THREAD_SERIALIZED={MPI.THREAD_SERIALIZED}): only the main "
                  "thread may call MPI, so every bucket is all-reduced after the backward (no overlap)")
        if r.rank == 0:
            print(reason, flush=True)
    return {"schedule": "the course's" if schedule is ddp_bucket_schedule else "yours", "plan": plan,
            "layers": [name for name, _ in grad_layers(r.model)], "layer_bytes": sizes, "layer_seconds": seconds,
            "first_bucket_bytes": FIRST_BUCKET_BYTES, "bucket_cap_bytes": BUCKET_CAP_BYTES,
            "overlap": reason is None, "no_overlap_reason": reason, "timeline": None}


def _take_ddp_step(state: TrainState, x, y, r: _Rank, group: MpiGroup, clock: dict, ddp: dict) -> float:
    """One step with DDP's buckets (:func:`.ddp.ddp_step`), then Adam; the main thread's seconds (forward,
    backward, Adam) go to ``clock['compute']``, the all-reduces' to ``group.seconds``."""
    tick = time.perf_counter()
    loss, averaged, ddp["timeline"] = ddp_step(state.theta, x[r.rows], y[r.rows], r.model, r.stack.ops, ddp["plan"],
                                               group, r.rank_tokens[r.rank], r.n_tokens, ddp["overlap"])
    adam_tick = time.perf_counter()
    adam_update(state, averaged, r.lr)
    clock["compute"] += ddp["timeline"]["layers"][-1][2] + time.perf_counter() - adam_tick
    ddp["step_s"] = time.perf_counter() - tick
    return loss


def _traced_peak(fn) -> tuple[object, int]:
    """``fn()`` and the peak bytes tracemalloc saw allocated during it, above what was allocated before. (Lesson
    06's ``measure_peak_bytes`` counts the CuPy pool in a GPU session; a rank computes on NumPy always.)"""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _measure_memory(state, zero: Zero1Optimizer | None, x, y, r: _Rank) -> dict:
    """This rank's bytes in a dedicated step on copies of its state (warmed up once, then traced).

    ``state_bytes``: θ + gradient + Adam's m and v as this rank holds them (its slices under ZeRO-1).
    ``peak_step_bytes``: θ, m and v (allocated before the step, so not traced) plus the traced peak of the step
    (the gradient, the activations the backward keeps, NumPy's temporaries, the all-reduce's buffers)."""
    theta = state.theta.copy()
    if zero is None:
        optimizer = TrainState(theta, state.m.copy(), state.v.copy(), state.step)
        moments = optimizer.m.nbytes + optimizer.v.nbytes
    else:
        optimizer = Zero1Optimizer(r.comm, theta, r.lr, state.step, zero.shard.m, zero.shard.v)
        moments = optimizer.shard.m.nbytes + optimizer.shard.v.nbytes
    group, clock = MpiGroup(r.comm, r.stack.ring_allreduce), {"compute": 0.0}
    _take_step(theta, x, y, r, group, optimizer, clock)  # the warm-up: first calls allocate once
    (_, grad_bytes), peak = _traced_peak(lambda: _take_step(theta, x, y, r, group, optimizer, clock))
    return {"state_bytes": int(theta.nbytes + grad_bytes + moments),
            "peak_step_bytes": int(theta.nbytes + moments + peak)}


def _start(config: RunConfig, folder: Path | None, r: _Rank, zero1: bool):
    """(state, zero, resumed_from): the resumed or fresh state, and ZeRO-1's optimizer (None without it). Under
    ZeRO-1 the state is a :class:`checkpoint.Zero1Shard`: the full-size moments are never made."""
    if not zero1:
        state = checkpoint.load_run(folder, config) if folder is not None else None
        return state or fresh_run(config), None, None if state is None else state.step
    shard = checkpoint.load_zero1(folder, config, r.rank, r.size) if folder is not None else None
    theta = init_theta(config.model, config.seed) if shard is None else shard.theta
    step = 0 if shard is None else shard.step
    zero = Zero1Optimizer(r.comm, theta, config.lr, step, *(() if shard is None else (shard.m, shard.v)))
    return checkpoint.Zero1Shard(theta, zero.shard.m, zero.shard.v, step), zero, None if shard is None else step


def _save(folder: Path, state, zero, config: RunConfig, r: _Rank) -> None:
    """The checkpoint of ``state.step``: rank 0's whole file, or ZeRO-1's shard of every rank, committed by rank 0
    with the manifest once the gather of their digests shows them all on disk."""
    if zero is None:
        if r.rank == 0:
            checkpoint.save_run(folder, state, config, r.stack.write_checkpoint)
        return
    digest = checkpoint.save_zero1_shard(folder, state, r.rank, r.size, config, r.stack.write_checkpoint)
    digests = r.comm.gather(digest, root=0)
    if r.rank == 0:
        checkpoint.commit_zero1(folder, state.step, digests, config, r.stack.write_checkpoint)


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
    parser.add_argument("--measure-memory", action="store_true",
                        help="after the timed loop, one dedicated step under tracemalloc: bytes per rank")
    parser.add_argument("--ddp-buckets", action="store_true",
                        help="DDP's buckets, all-reduced on a thread while the backward runs (ddp_schedule)")
    args = parser.parse_args(argv)
    if args.ddp_buckets and (args.zero1 or args.measure_memory):
        raise ValueError("--ddp-buckets runs the all-reduce of the plain data-parallel step: not with --zero1 or "
                         "--measure-memory")
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    config = RunConfig.from_dict(json.loads(args.config))
    model = config.model
    stack = Stack.course() if args.course_pieces else load_stack(quiet=True)
    folder = Path(args.folder) if args.folder else None
    if folder is not None:
        _write_small(folder / f"rank{rank}.pid", str(os.getpid()))
    tokens, _ = splits()
    shards = shard_rows(config.batch_size, size)
    r = _Rank(comm, stack, model, config.lr, shards[rank], [len(s) * model.context for s in shards])
    state, zero, resumed_from = _start(config, folder, r, args.zero1)
    group = MpiGroup(comm, stack.ring_allreduce)
    ddp = None
    if args.ddp_buckets:
        ddp = _ddp_setup(r, state.theta, *global_batch(tokens, state.step, config.batch_size, model.context,
                                                       config.data_seed), args.course_pieces)
    losses, clock, checkpoint_s, checkpoints = [], {"compute": 0.0}, 0.0, []
    comm.Barrier()
    start = time.perf_counter()
    while state.step < args.steps:
        x, y = global_batch(tokens, state.step, config.batch_size, model.context, config.data_seed)
        if ddp is None:
            loss, _ = _take_step(state.theta, x, y, r, group, zero if zero is not None else state, clock)
        else:
            loss = _take_ddp_step(state, x, y, r, group, clock, ddp)
        state.step += 1
        losses.append(comm.allreduce(loss * r.rank_tokens[rank]) / r.n_tokens)  # for the log: MPI's own all-reduce
        if folder is not None:
            if state.step % args.every == 0 or state.step == args.steps:
                tick = time.perf_counter()
                _save(folder, state, zero, config, r)
                checkpoint_s += time.perf_counter() - tick
                checkpoints.append(state.step)
            if rank == 0:
                _write_small(folder / "progress", str(state.step))
    seconds = time.perf_counter() - start
    comm_s, compute_all = comm.gather(group.seconds, root=0), comm.gather(clock["compute"], root=0)
    state_bytes = comm.gather(zero.state_bytes if zero else int(state.m.nbytes + state.v.nbytes), root=0)
    memory = None
    if ddp is not None:
        ddp["timelines"], ddp["step_seconds"] = comm.gather(ddp.pop("timeline"), root=0), comm.gather(ddp.pop(
            "step_s", None), root=0)
    if args.measure_memory:
        x, y = global_batch(tokens, state.step, config.batch_size, model.context, config.data_seed)
        memory = comm.gather(_measure_memory(state, zero, x, y, r), root=0)
    if rank == 0:
        np.save(args.out, state.theta)
        print(json.dumps({
            "n_ranks": size, "steps": state.step, "resumed_from": resumed_from, "losses": losses,
            "seconds": seconds, "compute_seconds": compute_all, "allreduce_seconds": comm_s,
            "checkpoint_seconds": checkpoint_s, "checkpoints": checkpoints, "rank_tokens": r.rank_tokens,
            "allreduce_calls": group.calls, "bytes_sent_rank0": group.net.bytes_sent,
            "pieces": {name: whose for name, whose in stack.whose.items()  # the schedule only where it planned
                       if name in RANK_PIECES and (name != "ddp_schedule" or args.ddp_buckets)},
            "out": args.out, "zero1": args.zero1,
            "optimizer_state_bytes": state_bytes,
            "peak_step_bytes": None if memory is None else [m["peak_step_bytes"] for m in memory],
            "state_bytes": None if memory is None else [m["state_bytes"] for m in memory],
            **({} if ddp is None else {"ddp": ddp}),
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
