"""Start the capstone's runs on MPI processes (data parallel, pipeline, expert parallel), and kill a rank mid-run.

:func:`run_data_parallel` goes through the one MPI launcher, :func:`mlsys_lab.mpi.run_mpi`, and returns rank 0's
report with the final θ. :func:`run_and_kill` starts the same command itself (``mlsys_lab.mpi.launch_command``),
watches the step rank 0 has reached, sends SIGKILL to one rank's process when it gets to ``kill_at_step``, and
waits for ``mpiexec`` to take the rest of the job down (MPICH and Open MPI end a job one of whose processes
died); it returns what the kill left: the step of the checkpoint on disk. :func:`run_pipeline` and
:func:`run_expert_parallel` start the pipeline's and the expert-parallel run's ranks through ``run_mpi`` too, after
checking the learner's piece that they run (the 1F1B schedule, the dispatch) here, in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from mlsys_lab import pieces
from mlsys_lab.capstone import checkpoint
from mlsys_lab.capstone.ddp import checked_plan, fitted_allreduce, grad_layer_bytes, measure_layer_seconds
from mlsys_lab.capstone.ep import check_expert_parallel, checked_dispatch
from mlsys_lab.capstone.model import course_ops, init_theta
from mlsys_lab.capstone.pipeline import checked_orders, course_one_f_one_b
from mlsys_lab.capstone.text import global_batch, shard_rows
from mlsys_lab.capstone.train import RunConfig, splits
from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.mpi import MpiUnavailable, child_environment, find_mpiexec, launch_command, mpi_flavor, run_mpi
from mlsys_lab.parallelism.dp import ddp_bucket_schedule
from mlsys_lab.validation import check_int

MODULE = "mlsys_lab.capstone.dp_run"


def _arguments(config: RunConfig, n_steps: int, out: Path, folder, every: int, course_pieces: bool,
               zero1: bool = False, measure_memory: bool = False, ddp_buckets: bool = False) -> list[str]:
    args = ["--config", json.dumps(config.to_dict()), "--steps", str(check_int("n_steps", n_steps, low=1)),
            "--out", str(out), "--every", str(check_int("every", every, low=1))]
    if folder is not None:
        args += ["--folder", str(folder)]
    return args + (["--course-pieces"] if course_pieces else []) + (["--zero1"] if zero1 else []) + (
        ["--measure-memory"] if measure_memory else []) + (["--ddp-buckets"] if ddp_buckets else [])


def _check_ddp_schedule(config: RunConfig, n_ranks: int) -> None:
    """Your ``ddp_schedule`` planned on this process's measured layer seconds and checked
    (:func:`~mlsys_lab.capstone.ddp.checked_plan`): a plan that cannot run is told here, before any rank trains."""
    model = config.model
    theta = init_theta(model, config.seed)
    x, y = global_batch(splits()[0], 0, config.batch_size, model.context, config.data_seed)
    rows = shard_rows(config.batch_size, n_ranks)[0]
    checked_plan(pieces.piece("ddp_schedule", course=ddp_bucket_schedule, quiet=True),
                 measure_layer_seconds(theta, x[rows], y[rows], model, course_ops()), grad_layer_bytes(model),
                 fitted_allreduce(n_ranks))


def run_data_parallel(config: RunConfig, n_steps: int, n_ranks: int = 2, folder: str | Path | None = None,
                      every: int = 5, course_pieces: bool = False, zero1: bool = False,
                      timeout_s: float = 300.0, measure_memory: bool = False, ddp_buckets: bool = False) -> dict:
    """Train on ``n_ranks`` MPI processes until ``n_steps`` steps are done (resuming from ``folder``'s checkpoint
    if it holds one); rank 0's report, with ``theta`` the final parameters. ``course_pieces``: run the course's
    pieces even where the learner has their own; ``zero1``: shard Adam's state (:mod:`.zero`; each rank writes
    its shard, a manifest commits the step); ``measure_memory``: one more, untimed step under tracemalloc, and the
    report's ``peak_step_bytes`` and ``state_bytes`` per rank (:mod:`.memory` models them); ``ddp_buckets``: DDP's
    buckets planned by ``ddp_schedule`` and all-reduced while the backward runs (:mod:`.ddp`; the report's
    ``ddp``), the plan checked here first."""
    if ddp_buckets and not course_pieces:
        _check_ddp_schedule(config, check_int("n_ranks", n_ranks, low=1, high=16))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "theta.npy"
        result = run_mpi(MODULE, check_int("n_ranks", n_ranks, low=1, high=16),
                         _arguments(config, n_steps, out, folder, every, course_pieces, zero1, measure_memory,
                                    ddp_buckets),
                         timeout_s)
        result["theta"] = np.load(out)
    return result


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def run_and_kill(config: RunConfig, n_steps: int, folder: str | Path, kill_rank: int, kill_at_step: int,
                 n_ranks: int = 2, every: int = 5, course_pieces: bool = False, timeout_s: float = 300.0,
                 zero1: bool = False) -> dict:
    """Start the run, SIGKILL rank ``kill_rank`` once rank 0 has finished ``kill_at_step`` steps, wait for the job
    to end. Returns the step rank 0 had reached when the signal went, mpiexec's exit status, and the step of the
    checkpoint the kill left on disk (None if none). ``zero1``: the ZeRO-1 run, whose step on disk is the one its
    manifest committed (every rank's shard of it written)."""
    check_int("kill_rank", kill_rank, low=0, high=n_ranks - 1)
    check_int("kill_at_step", kill_at_step, low=1, high=n_steps - 1)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise MpiUnavailable("no mpiexec found next to Python or on PATH (pip install mpich mpi4py)")
    folder = Path(folder)
    for stale in ("progress", *(f"rank{r}.pid" for r in range(n_ranks))):
        (folder / stale).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        command = launch_command(mpiexec, mpi_flavor(mpiexec), n_ranks, MODULE,
                                 _arguments(config, n_steps, Path(scratch) / "theta.npy", folder, every,
                                            course_pieces, zero1))
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=child_environment(), start_new_session=True)
        deadline, reached = time.monotonic() + timeout_s, None
        try:
            while job.poll() is None and time.monotonic() < deadline:
                step = _read_int(folder / "progress")
                pid = _read_int(folder / f"rank{kill_rank}.pid")
                if step is not None and step >= kill_at_step and pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    reached = step
                    break
                time.sleep(0.002)
            _, stderr = job.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
            raise RuntimeError(f"the job did not end within {timeout_s:g} s after the kill") from None
    if reached is None:
        raise RuntimeError(f"the run ended (exit {job.returncode}) before rank 0 reached step {kill_at_step}; "
                           f"nothing was killed\n{stderr[-1500:]}")
    state = checkpoint.load_zero1(folder, config, 0, n_ranks) if zero1 else checkpoint.load_run(folder, config)
    return {"killed_rank": kill_rank, "killed_at_step": reached, "exit_code": job.returncode,
            "checkpoint_step": None if state is None else state.step, "stderr_tail": stderr[-600:]}


PIPELINE_MODULE = "mlsys_lab.capstone.pp_run"


def run_pipeline(config: RunConfig, n_steps: int, n_microbatches: int = 4, course_pieces: bool = False,
                 timeout_s: float = 300.0) -> dict:
    """Train ``n_steps`` steps in the two-stage pipeline on 2 MPI processes (:mod:`.pp_run`), each stage running its
    op list of the ``one_f_one_b`` piece (yours, else the course's; ``course_pieces``: the course's); rank 0's report
    (losses, whose schedule ran, the peak of stashed micro-batches per rank, the last step's timeline per rank,
    seconds per step), with ``theta`` the final parameters."""
    check_int("n_steps", n_steps, low=1, high=10**6)
    check_int("n_microbatches", n_microbatches, low=1, high=config.batch_size)
    args = ["--config", json.dumps(config.to_dict()), "--steps", str(n_steps), "--microbatches", str(n_microbatches)]
    args += ["--course-pieces"] if course_pieces else []
    if not course_pieces:  # a schedule that cannot run is told here, in one line, not in two ranks' tracebacks
        checked_orders(pieces.piece("one_f_one_b", course=course_one_f_one_b, quiet=True), n_microbatches)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "theta.npy"
        result = run_mpi(PIPELINE_MODULE, 2, args + ["--out", str(out)], timeout_s)
        result["theta"] = np.load(out)
    return result


EXPERT_PARALLEL_MODULE = "mlsys_lab.capstone.ep_run"


def run_expert_parallel(config: RunConfig, n_steps: int, n_ranks: int = 2, course_pieces: bool = False,
                        timeout_s: float = 300.0) -> dict:
    """Train ``n_steps`` steps of ``config``'s MoE model with its experts sharded over ``n_ranks`` MPI processes
    (:mod:`.ep`, :mod:`.ep_run`), every block's rows dispatched by the ``ep_dispatch`` piece (yours, else the
    course's; ``course_pieces``: the course's). The model's ``routing_groups`` must be ``n_ranks``: the same config
    trained on one process (:func:`~mlsys_lab.capstone.train.train`) is the same computation. Your ``ep_dispatch``
    is checked on simulated ranks here first, so a broken one is named before any rank starts. Rank 0's report
    (losses, seconds per step, all-to-all bytes and dropped pairs per step, each dispatch's all_to_all calls, whose
    pieces ran), with ``theta`` the final parameters, every rank's experts gathered."""
    check_expert_parallel(config, n_ranks)
    check_int("n_steps", n_steps, low=1, high=10**6)
    if not course_pieces:
        checked_dispatch(pieces.piece("ep_dispatch", course=expert_dispatch, quiet=True))
    args = ["--config", json.dumps(config.to_dict()), "--steps", str(n_steps)]
    args += ["--course-pieces"] if course_pieces else []
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "theta.npy"
        result = run_mpi(EXPERT_PARALLEL_MODULE, n_ranks, args + ["--out", str(out)], timeout_s)
        result["theta"] = np.load(out)
    return result
