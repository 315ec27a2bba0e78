"""A two-stage pipeline of the capstone's transformer over 2 MPI ranks, in the order of a 1F1B schedule.

Stage 0 (rank 0) holds the embedding and the first ⌈L/2⌉ blocks; stage 1 (rank 1) the other blocks, the final
layer norm, the head and the loss. With L = 1, stage 1 holds only the head. The layout of θ puts wte, wpe and the
blocks first and lnf, head last, so each stage owns one contiguous slice of θ (:func:`stage_slice`).

A global batch of B sequences is cut into m micro-batches of rows (sizes differ by at most one). Each rank runs
its own op list, ``[("F", 0), ("F", 1), ("B", 0), ...]`` (lesson 08's ``one_f_one_b``, or the course's
:func:`course_one_f_one_b`):

==========  ===========================================================  =========================================
op          stage 0                                                      stage 1
F i         embed rows of micro-batch i, run its blocks, send the        receive it, run its blocks, the loss and
            activation (B_i, T, C) to rank 1; stash the blocks' caches   d loss / d x; stash the caches and dx
B i         receive dx from rank 1, backward through its blocks and      backward through its blocks from the
            the embedding; drop the stash of i                           stashed dx, send dx to rank 0; drop it
==========  ===========================================================  =========================================

1F1B (PipeDream-Flush, Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN training") lets stage d run
p − d − 1 forwards ahead, then alternates one forward with one backward: stage d never holds the stash of more than
min(p − d, m) micro-batches. GPipe (all forwards, then all backwards) takes as long but holds m on every stage.

Every micro-batch's gradient is the gradient of *its own* mean loss (the head averages over its B_i·T tokens); the
stages add it weighted by the micro-batch's share of the global batch's tokens, B_i / B, so that the sum is the
gradient of the mean over the whole global batch: the single-process step's gradient, up to summation order.
Messages go with ``Isend`` (a blocking ``Send`` of a large activation can wait for its receive and deadlock two
ranks that both send); ``Recv`` matches micro-batch i by its tag. :func:`validate_orders` runs a schedule through
lesson 08's simulator first: an order that would deadlock is refused with a message instead of hanging two ranks.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    embed,
    embed_back,
    head_loss_and_back,
    param_layout,
    transformer_block,
    transformer_block_back,
    views,
)
from mlsys_lab.capstone.text import shard_rows
from mlsys_lab.parallelism.pp import Op, schedule_ops, simulate_ops
from mlsys_lab.validation import check_array, check_int, check_type

N_STAGES = 2  # the capstone's pipeline: two stages on two ranks
MAX_STAGES, MAX_MICROBATCHES = 64, 4096  # what a schedule may ask for (lesson 08's simulator runs it)


def course_one_f_one_b(n_stages: int, n_microbatches: int) -> list[list[tuple[str, int]]]:
    """The course's 1F1B order of each stage, as ("F", i) / ("B", i) pairs: lesson 08's
    ``schedule_ops(p, m, "1f1b")`` (PipeDream-Flush: min(p − d − 1, m) warm-up forwards on stage d, then one forward
    and one backward in turn, then the remaining backwards)."""
    p = check_int("n_stages", n_stages, low=1, high=MAX_STAGES)
    m = check_int("n_microbatches", n_microbatches, low=1, high=MAX_MICROBATCHES)
    return validate_orders([[(op.kind, op.microbatch) for op in ops] for ops in schedule_ops(p, m, "1f1b")], p, m)


def _stage_ops(ops, d: int, m: int) -> list[tuple[str, int]]:
    """Stage ``d``'s ops as (kind, micro-batch) pairs, each F i and B i once, B i after F i; else ValueError."""
    if not isinstance(ops, (list, tuple)):
        raise TypeError(f"orders[{d}] must be a list of ('F', i) / ('B', i) pairs; got {type(ops).__name__}")
    parsed = []
    for k, op in enumerate(ops):
        ok = isinstance(op, (list, tuple)) and len(op) == 2 and isinstance(op[0], str) and op[0] in ("F", "B")
        ok = ok and isinstance(op[1], (int, np.integer)) and not isinstance(op[1], bool) and 0 <= op[1] < m
        if not ok:
            raise ValueError(f"orders[{d}][{k}] must be ('F' or 'B', a micro-batch in [0, {m - 1}]); got {op!r:.40}")
        parsed.append((str(op[0]), int(op[1])))
    for kind in ("F", "B"):
        counts = Counter(i for k, i in parsed if k == kind)
        wrong = next((i for i in range(m) if counts[i] != 1), None)
        if wrong is not None:
            raise ValueError(f"orders[{d}] must run {kind} i exactly once for every micro-batch i < {m}; "
                             f"stage {d} runs {kind} {wrong} {counts[wrong]} times")
    forward_at = {i: pos for pos, (k, i) in enumerate(parsed) if k == "F"}
    for pos, (k, i) in enumerate(parsed):
        if k == "B" and pos < forward_at[i]:
            raise ValueError(f"orders[{d}] runs B {i} before F {i}: a backward needs the stash of its forward")
    return parsed


def validate_orders(orders, n_stages: int, n_microbatches: int) -> list[list[tuple[str, int]]]:
    """``orders`` as lists of (kind, micro-batch) pairs, or a ValueError saying what is wrong, before a rank runs
    them: one list per stage; on each stage F i and B i exactly once per micro-batch, B i after F i; and no
    deadlock across stages (lesson 08's :func:`~mlsys_lab.parallelism.pp.simulate_ops` runs them first)."""
    p = check_int("n_stages", n_stages, low=1, high=MAX_STAGES)
    m = check_int("n_microbatches", n_microbatches, low=1, high=MAX_MICROBATCHES)
    if not isinstance(orders, (list, tuple)) or len(orders) != p:
        got = f"{len(orders)} lists" if isinstance(orders, (list, tuple)) else type(orders).__name__
        raise ValueError(f"orders must hold one op list per stage (n_stages={p} lists); got {got}")
    parsed = [_stage_ops(ops, d, m) for d, ops in enumerate(orders)]
    try:
        simulate_ops([[Op(kind, i) for kind, i in ops] for ops in parsed])
    except RuntimeError as exc:
        raise ValueError(f"orders would deadlock the ranks ({exc}): a stage waits for a message its neighbour "
                         "sends only after an op that waits for this stage") from None
    return parsed


def checked_orders(schedule, n_microbatches: int) -> list[list[tuple[str, int]]]:
    """``schedule(2, m)``'s op lists, validated (:func:`validate_orders`); a ValueError names whose schedule cannot
    run and why. The launcher calls it before ``mpiexec`` and every rank again before its first op."""
    if not callable(schedule):
        raise TypeError(f"schedule must be a function (n_stages, n_microbatches) -> op lists, as one_f_one_b; got "
                        f"{type(schedule).__name__}")
    check_int("n_microbatches", n_microbatches, low=1, high=MAX_MICROBATCHES)
    try:
        return validate_orders(schedule(N_STAGES, n_microbatches), N_STAGES, n_microbatches)
    except ValueError as exc:
        whose = "the course's" if schedule is course_one_f_one_b else "your"
        raise ValueError(f"{whose} one_f_one_b ({N_STAGES} stages, {n_microbatches} micro-batches) cannot run: "
                         f"{exc}") from exc


def stage_layers(config: GPTConfig, stage: int) -> range:
    """The blocks of ``stage``: 0 … ⌈L/2⌉ − 1 on stage 0, the others on stage 1."""
    check_type("config", config, GPTConfig)
    check_int("stage", stage, low=0, high=N_STAGES - 1)
    split = (config.n_layers + 1) // 2
    return range(0, split) if stage == 0 else range(split, config.n_layers)


def stage_slice(config: GPTConfig, stage: int) -> slice:
    """The slice of θ that ``stage`` owns: wte, wpe and its blocks (stage 0), or its blocks, lnf and head."""
    check_int("stage", stage, low=0, high=N_STAGES - 1)
    first = f"h{stage_layers(config, 1).start}."
    end = 0
    for name, shape in param_layout(config):
        if name.startswith(first) or name.startswith("lnf."):
            break
        end += int(np.prod(shape))
    return slice(0, end) if stage == 0 else slice(end, None)


@dataclass
class StageStep:
    """What one stage's step left: the gradient of its slice of θ (the full vector, zero elsewhere), the per-token
    losses of the global batch (stage 1; None on stage 0), the most micro-batches it held stashed at once, and a
    timeline of its ops, (kind, micro-batch, start, end) in seconds from the step's start."""

    grad: np.ndarray
    losses: np.ndarray | None
    peak_stashed: int
    timeline: list[tuple[str, int, float, float]]

    def __post_init__(self) -> None:
        check_array("grad", self.grad, ndim=1, kinds="f", finite=True)
        if self.losses is not None:
            check_array("losses", self.losses, ndim=1, kinds="f", finite=True)
        check_int("peak_stashed", self.peak_stashed, low=0)
        check_type("timeline", self.timeline, list)


class PipelineStage:
    """One rank's stage of the two-stage pipeline (see the module docstring); ``comm`` an MPI communicator of two
    ranks whose rank is ``stage``."""

    def __init__(self, stage: int, config: GPTConfig, ops: ModelOps, comm) -> None:
        self.stage = check_int("stage", stage, low=0, high=N_STAGES - 1)
        self.config, self.ops = check_type("config", config, GPTConfig), check_type("ops", ops, ModelOps)
        self.comm = comm
        self.layers, self.part, self.peer = stage_layers(config, stage), stage_slice(config, stage), 1 - stage

    def step(self, theta: np.ndarray, idx: np.ndarray, targets: np.ndarray, order, n_microbatches: int) -> StageStep:
        """Run this stage's ``order`` on the global batch (``idx``, ``targets``: (B, T)) cut into micro-batches."""
        check_array("theta", theta, ndim=1, kinds="f")
        check_array("idx", idx, ndim=2, kinds="iu")
        if check_array("targets", targets, ndim=2, kinds="iu").shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {idx.shape}; got {targets.shape}")
        m = check_int("n_microbatches", n_microbatches, low=1, high=len(idx))
        order = _stage_ops(order, self.stage, m)  # the whole schedule was checked by validate_orders already
        self.w, self.rows, self.positions = views(theta, self.config), shard_rows(len(idx), m), idx.shape[1]
        self.grad, self.scratch = np.zeros_like(theta), np.zeros_like(theta)
        self.stash, self.losses, self.sends = {}, {}, []
        timeline, peak, t0 = [], 0, time.perf_counter()
        for kind, i in order:
            incoming = self._receive(kind, i)  # waiting for a neighbour is idle time, not the op's
            start = time.perf_counter()
            (self._forward if kind == "F" else self._backward)(i, idx, targets, incoming)
            timeline.append((kind, i, start - t0, time.perf_counter() - t0))
            peak = max(peak, len(self.stash))
        for request, _ in self.sends:
            request.Wait()
        losses = np.concatenate([self.losses[i] for i in range(m)]) if self.stage == 1 else None
        return StageStep(self.grad, losses, peak, timeline)

    def _receive(self, kind: str, i: int) -> np.ndarray | None:
        """The activation (stage 1's F) or dx (stage 0's B) of micro-batch i from the other rank; else None."""
        if (kind == "F") != (self.stage == 1):
            return None
        buffer = np.empty((len(self.rows[i]), self.positions, self.config.d_model), dtype=self.grad.dtype)
        self.comm.Recv(buffer, source=self.peer, tag=i)
        return buffer

    def _send(self, array: np.ndarray, i: int) -> None:
        buffer = np.ascontiguousarray(array, dtype=self.grad.dtype)
        self.sends.append((self.comm.Isend(buffer, dest=self.peer, tag=i), buffer))  # the buffer lives until Wait

    def _accumulate(self, i: int) -> None:
        """grad += (B_i / B) · micro-batch i's gradient (of its own mean loss), then clear the scratch."""
        share = len(self.rows[i]) / sum(len(r) for r in self.rows)
        self.grad[self.part] += share * self.scratch[self.part]
        self.scratch[self.part] = 0.0

    def _forward(self, i: int, idx: np.ndarray, targets: np.ndarray, incoming: np.ndarray | None) -> None:
        rows = self.rows[i]
        x, caches = (embed(self.w, idx[rows]) if self.stage == 0 else incoming), []
        for layer in self.layers:
            x, cache = transformer_block(x, self.w, layer, self.config, self.ops)
            caches.append(cache)
        if self.stage == 0:
            self.stash[i] = caches
            self._send(x, i)
            return
        g = views(self.scratch, self.config)  # the head's backward runs with the loss: lnf's and head.w's gradient
        self.losses[i], dx = head_loss_and_back(x, targets[rows], self.w, g, self.ops, dtype=self.grad.dtype)
        self._accumulate(i)
        self.stash[i] = (caches, dx)

    def _backward(self, i: int, idx: np.ndarray, _targets: np.ndarray, incoming: np.ndarray | None) -> None:
        caches, dx = (self.stash.pop(i), incoming) if self.stage == 0 else self.stash.pop(i)
        g = views(self.scratch, self.config)
        for layer, cache in zip(reversed(self.layers), reversed(caches), strict=True):
            dx = transformer_block_back(dx, cache, self.w, g, layer, self.config, self.ops)
        if self.stage == 0:
            embed_back(dx, idx[self.rows[i]], g)
        else:
            self._send(dx, i)
        self._accumulate(i)
