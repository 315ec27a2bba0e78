"""Does the capstone's system hold with your pieces in it? Six checks, and the piece that breaks one, by name.

1. **operators**: a short float64 run on one process with your operators (the loss and its gradient, the layer-norm
   and attention backward) takes the course's steps: every loss and the final θ within a relative 10⁻⁹.
2. **data parallel**: the same run over 2 MPI ranks, your ring all-reduce and your gradient averaging summing the
   ranks' gradients (the batch split 3 + 2 sequences, so that weighting by tokens matters), ends at the one-process
   θ within a relative 10⁻⁹.
3. **resume**: that run killed with SIGKILL mid-way, then started again, resumes from the checkpoint your crash-safe
   writer wrote (not from step 0) and ends bit for bit where the uninterrupted run ends.

4. **tensor parallel** (simulated ranks in this process): the run with every block's MLP split over 2 ranks by your
   ``tp_mlp`` (:mod:`mlsys_lab.capstone.tp`) ends at the one-process θ within a relative 10⁻⁹.
5. **pipeline**: the run in two stages on 2 MPI ranks, in your ``one_f_one_b`` order (:mod:`.pipeline`), ends at the
   one-process θ within a relative 10⁻⁹, and no stage stashes more micro-batches than 1F1B's min(p − d, m).

6. **expert parallel**: the model with experts (4 of them, top-2, capacity factor 1) trained with its experts
   sharded over 2 MPI ranks, every MoE block's rows dispatched by your ``ep_dispatch`` (:mod:`.ep`), ends at the
   one-process θ of the same model (each rank's shard its own routing group) within a relative 10⁻⁹, with exactly
   one all_to_all per dispatch. Your ``ep_dispatch`` is first run on simulated ranks against the course's, so a
   dispatch that drops rows, sends more than is due or calls all_to_all twice is named before a rank starts.

A check that fails with pieces of yours in it is run again with each of those pieces swapped for the course's in
turn (:func:`mlsys_lab.pieces.use_course`, then back to yours): the piece whose swap makes it pass is named. The
MPI ranks read the same piece store, so a swap reaches them too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from mlsys_lab import backend, pieces
from mlsys_lab.capstone.launch import run_and_kill, run_data_parallel, run_expert_parallel, run_pipeline
from mlsys_lab.capstone.model import GPTConfig, course_ops
from mlsys_lab.capstone.moe import MoeConfig
from mlsys_lab.capstone.stack import load_stack
from mlsys_lab.capstone.tp import tensor_parallel_mlp
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.validation import check_int, check_type

RTOL = 1e-9  # float64 runs differ only in summation order
PIPELINE_MICROBATCHES = 4  # of VERIFY_CONFIG's 5 sequences: 2, 1, 1, 1 (unequal shares: the weighting matters)
# What each check runs: the pieces a failure can be blamed on.
STAGE_PIECES: dict[str, tuple[str, ...]] = {
    "operators": ("softmax_cross_entropy", "layer_norm_backward", "attention_backward"),
    "data parallel": ("ring_allreduce", "average_gradients"),
    "resume": ("crash_safe_writer",),
    "tensor parallel": ("tp_mlp",),
    "pipeline": ("one_f_one_b",),
    "expert parallel": ("ep_dispatch", "route_with_capacity", "top_k_gate"),
}
EP_MOE = MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0, routing_groups=2)  # the expert-parallel check's experts
VERIFY_CONFIG = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=1, dtype="float64"),
                          batch_size=5, lr=1e-2)


@dataclass(frozen=True)
class StageResult:
    """One check: passed or not, what was measured, whose pieces ran, and the piece a failure comes from."""

    stage: str
    passed: bool
    detail: str
    whose: dict[str, str] = field(default_factory=dict)
    culprit: str | None = None

    @property
    def summary(self) -> str:
        """``✓ operators`` or ``✗ resume``: the verdict alone, the same on every machine."""
        return f"{'✓' if self.passed else '✗'} {self.stage}"

    @property
    def line(self) -> str:
        yours = [name for name, who in self.whose.items() if who == "yours"]
        pieces_text = f"; yours: {', '.join(yours)}" if yours else "; the course's pieces only"
        if self.passed:
            return f"✓ {self.stage}: {self.detail}{pieces_text}"
        blame = (f"; your {self.culprit} is the cause: with the course's {self.culprit} it passes "
                 f"(use_course({self.culprit!r}) switches it)" if self.culprit else "")
        return f"✗ {self.stage}: {self.detail}{blame}{pieces_text}"


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


def _reference_ops():
    """The course's operators, with the loss the MPI ranks run: on a CUDA GPU the ranks' loss is the float32 kernel
    (:mod:`mlsys_lab.capstone.gpu_loss`), so the one-process run they are compared with uses it too (each row's loss
    depends on that row alone: sharding the batch changes no bit of it). On a CPU: the course's operators."""
    ops = course_ops()
    if backend.on_gpu:
        ops = dataclasses.replace(ops, cross_entropy=load_stack(quiet=True).ops.cross_entropy)
    return ops


@functools.lru_cache(maxsize=4)
def _course_run(config: RunConfig, n_steps: int):
    """The course's single-process run: what the parallel checks compare with, computed once (a check rerun with a
    piece swapped compares with the same run)."""
    return train(config, n_steps, ops=_reference_ops())


def _operators(config: RunConfig, n_steps: int, _folder: Path) -> tuple[bool, str]:
    ours, ours_log = train(config, n_steps, ops=course_ops())  # float64 operators on both sides, GPU or not
    stack = load_stack(quiet=True)
    theirs, theirs_log = train(config, n_steps, ops=stack.exact_ops)
    losses = _relative(np.array(theirs_log.losses), np.array(ours_log.losses))
    theta = _relative(theirs.theta, ours.theta)
    ok = bool(max(losses, theta) <= RTOL)
    return ok, f"{n_steps} steps, losses within {losses:.1e} and θ within {theta:.1e} of the course's (≤ {RTOL:g})"


def _data_parallel(config: RunConfig, n_steps: int, _folder: Path) -> tuple[bool, str]:
    single, _ = _course_run(config, n_steps)
    parallel = run_data_parallel(config, n_steps, n_ranks=2)
    gap = _relative(parallel["theta"], single.theta)
    return bool(gap <= RTOL), f"2 ranks, θ after {n_steps} steps within {gap:.1e} of one process (≤ {RTOL:g})"


def _resume(config: RunConfig, n_steps: int, folder: Path) -> tuple[bool, str]:
    run_folder = Path(tempfile.mkdtemp(prefix="resume_", dir=folder))
    killed = run_and_kill(config, n_steps, run_folder, kill_rank=1, kill_at_step=n_steps // 2 + 1, every=2)
    resumed = run_data_parallel(config, n_steps, n_ranks=2, folder=run_folder, every=2)
    whole = run_data_parallel(config, n_steps, n_ranks=2)
    same = bool(np.array_equal(resumed["theta"], whole["theta"]))
    step = killed["checkpoint_step"]
    if step is None or resumed["resumed_from"] != step:
        return False, (f"killed at step {killed['killed_at_step']}; the restart found no checkpoint to resume from "
                       f"(checkpoint on disk: {step}, resumed from: {resumed['resumed_from']})")
    return same, (f"killed at step {killed['killed_at_step']}, resumed from the checkpoint of step {step}: "
                  f"{'bit-for-bit equal' if same else 'not equal'} to the uninterrupted run")


def _tensor_parallel(config: RunConfig, n_steps: int, _folder: Path) -> tuple[bool, str]:
    """The run with every block's MLP split over 2 tensor-parallel ranks by your ``tp_mlp`` (the course's operators
    otherwise): θ within RTOL of the course's one-process run."""
    single, _ = _course_run(config, n_steps)
    mlp, mlp_back, group = tensor_parallel_mlp(load_stack(quiet=True).tp_mlp, n_ranks=2)
    split, _ = train(config, n_steps, ops=_reference_ops(), mlp=mlp, mlp_back=mlp_back)
    gap = _relative(split.theta, single.theta)
    return bool(gap <= RTOL), (f"2 ranks, the MLP split by columns of W1 and rows of W2: θ after {n_steps} steps "
                               f"within {gap:.1e} of one process (≤ {RTOL:g}); {group.calls // n_steps} "
                               f"all-reduces a step")


def _pipeline(config: RunConfig, n_steps: int, _folder: Path) -> tuple[bool, str]:
    """The run in a two-stage pipeline on 2 MPI ranks in your ``one_f_one_b`` order (a block on each stage: at least
    two layers), micro-batches of 2, 1, 1, 1 sequences: θ within RTOL of one process, and no stage stashing more
    micro-batches than 1F1B's min(p − d, m) (GPipe's order trains as well, but stashes m on every stage)."""
    config = dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                   n_layers=max(config.model.n_layers, 2)))
    m = min(PIPELINE_MICROBATCHES, config.batch_size)
    single, _ = _course_run(config, n_steps)
    run = run_pipeline(config, n_steps, m)  # a malformed or deadlocking order: ValueError, why, before mpiexec
    gap = _relative(run["theta"], single.theta)
    peaks, bounds = run["peak_stashed"], run["stash_bound"]
    stash_ok = all(peak <= bound for peak, bound in zip(peaks, bounds, strict=True))
    return bool(gap <= RTOL and stash_ok), (
        f"2 stages, θ after {n_steps} steps within {gap:.1e} of one process (≤ {RTOL:g}); micro-batches stashed at "
        f"most {peaks} per stage ({'within' if stash_ok else 'over'} 1F1B's min(p − d, m) = {bounds})")


def _expert_parallel(config: RunConfig, n_steps: int, _folder: Path) -> tuple[bool, str]:
    """The model with experts (:data:`EP_MOE`, in place of the config's MLP) on 2 MPI ranks, 2 experts each, every
    block's rows dispatched by your ``ep_dispatch``: θ within RTOL of the same model on one process, and exactly one
    all_to_all per dispatch (the launcher first runs the piece on simulated ranks: a ValueError naming it)."""
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, moe=EP_MOE))
    single, _ = _course_run(config, n_steps)
    run = run_expert_parallel(config, n_steps, n_ranks=2)
    gap = _relative(run["theta"], single.theta)
    calls = sorted({c for step in run["dispatch_calls"] for c in step})
    return bool(gap <= RTOL and calls == [1]), (
        f"2 ranks, 2 experts each: θ after {n_steps} steps within {gap:.1e} of one process (≤ {RTOL:g}); all_to_all "
        f"calls per dispatch: {calls} (budget 1); rank 0 sent {np.mean(run['alltoall_bytes_per_step']):.0f} bytes "
        f"a step in all-to-alls")


STAGES: dict[str, Callable[[RunConfig, int, Path], tuple[bool, str]]] = {
    "operators": _operators, "data parallel": _data_parallel, "resume": _resume, "tensor parallel": _tensor_parallel,
    "pipeline": _pipeline, "expert parallel": _expert_parallel}
# What verify_pieces() runs when no stages are named: the six checks the lesson prints (expert parallel adds about
# 1 s on a 2-core CPU).
DEFAULT_STAGES = ("operators", "data parallel", "resume", "tensor parallel", "pipeline", "expert parallel")


def _whose(names: tuple[str, ...]) -> dict[str, str]:
    return {name: "yours" if pieces.load_piece(name)[0] is not None else "the course's" for name in names}


def _quietly(switch: Callable[[str], None], name: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        switch(name)


def _blame(stage: str, run: Callable[[], tuple[bool, str]], whose: dict[str, str]) -> str | None:
    """The first of your pieces in ``stage`` whose swap for the course's makes the check pass."""
    for name in (n for n, who in whose.items() if who == "yours"):
        _quietly(pieces.use_course, name)
        try:
            passed, _ = run()
        except Exception:  # noqa: BLE001 - another piece still breaks the run: not this one alone
            passed = False
        finally:
            _quietly(pieces.use_yours, name)
        if passed:
            return name
    return None


def verify_pieces(config: RunConfig = VERIFY_CONFIG, n_steps: int = 6, stages: tuple[str, ...] = DEFAULT_STAGES,
                  folder: str | Path | None = None) -> list[StageResult]:
    """Run the checks of ``stages`` (see the module docstring; all six by default) with your pieces; one
    :class:`StageResult` each.
    ``folder``: where the resume check's runs write their checkpoints (a temporary folder by default)."""
    check_type("config", config, RunConfig)
    check_int("n_steps", n_steps, low=4, high=1000)
    check_type("stages", stages, tuple)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"stages must be among {tuple(STAGES)}; got {unknown}")
    results = []
    with tempfile.TemporaryDirectory(prefix="capstone_verify_") as scratch:
        base = Path(folder) if folder is not None else Path(scratch)
        for stage in stages:
            whose = _whose(STAGE_PIECES[stage])

            def run(stage=stage) -> tuple[bool, str]:
                return STAGES[stage](config, n_steps, base)

            try:
                passed, detail = run()
            except Exception as exc:  # noqa: BLE001 - a piece that raises fails the check; its message says which
                passed, detail = False, f"the run failed: {type(exc).__name__}: {str(exc)[:300]}"
            culprit = None if passed else _blame(stage, run, whose)
            results.append(StageResult(stage, passed, detail, whose, culprit))
    return results
