"""Activation (gradient) checkpointing on the autodiff engine, measured (Chen et al. 2016).

Split the n blocks into segments of ``segment_length`` k. The forward pass keeps only each
segment's input (a *checkpoint*, one (B, d) array) and records no tape inside the segment. The
backward pass walks the segments from last to first: re-run the segment's forward *with* a tape from
its checkpoint, backpropagate through it, drop it. The last segment is run with a tape in the first
place, so it is never recomputed.

Memory, in units of one block's saved activations s and one checkpoint c:

    peak(k) ≈ ceil(n/k)·c + k·s          minimised at k* = √(n·c/s), where peak = 2·√(n·c·s) = O(√n)

Compute: every block outside the last segment runs forward twice: n − k extra block forwards,
≈ one extra forward pass. With backward ≈ 2 × forward (two matmuls per matmul), a step costs
(1 + 1 + 2) / (1 + 2) ≈ 1.33 × the step without recomputation (Chen et al. 2016, §4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_lab.timing import benchmark
from mlsys_lab.training_memory.autodiff import Tape, Tensor, softmax_cross_entropy
from mlsys_lab.training_memory.training import MLP, _check_batch
from mlsys_lab.validation import check_array, check_finite, check_int, check_sequence


@dataclass(frozen=True)
class StepStats:
    """What one forward+backward step kept and did."""

    loss: float
    segment_length: int
    peak_activation_bytes: int  # max over the step of (stem tape + live checkpoints + current tape)
    n_checkpoints: int
    n_block_forwards: int  # n blocks plus what was recomputed

    def __post_init__(self) -> None:
        check_finite("loss", self.loss, low=0.0)  # a cross-entropy
        check_int("segment_length", self.segment_length, low=1)
        for name in ("peak_activation_bytes", "n_checkpoints", "n_block_forwards"):
            check_int(name, getattr(self, name), low=0)


def _segments(n_blocks: int, segment_length: int) -> list[range]:
    starts = range(0, n_blocks, segment_length)
    return [range(start, min(start + segment_length, n_blocks)) for start in starts]


def forward_backward(model: MLP, x, labels, segment_length: int | None = None) -> StepStats:
    """One step's forward and backward with checkpointing every ``segment_length`` blocks.

    ``segment_length=None`` (or ≥ n_blocks) is plain backprop: the whole model on one tape.
    Leaves ``.grad`` on every parameter, exactly equal (up to rounding) to plain backprop's.
    """
    _check_batch(model, x, labels)
    n = len(model.blocks)
    k = n if segment_length is None else check_int("segment_length", segment_length, low=1)
    k = max(1, min(k, n))
    segments = _segments(n, k) if n else []
    start_count = model.n_block_forwards
    model.zero_grad()

    stem_tape = Tape()
    h0 = Tensor(x, stem_tape) @ model.stem[0] + model.stem[1]
    # Forward: segments but the last run without a tape; keep their inputs (the checkpoints).
    checkpoints = []
    h = h0.data
    for segment in segments[:-1]:
        checkpoints.append(h)
        t = Tensor(h)  # no tape: nothing is kept inside the segment
        for index in segment:
            t = model.run_block(index, t)
        h = t.data
    checkpoint_bytes = sum(int(c.nbytes) for c in checkpoints)

    # The last segment, the head and the loss on one tape.
    last_tape = Tape()
    last_input = Tensor(h, last_tape, requires_grad=True)
    t = last_input
    for index in (segments[-1] if segments else ()):
        t = model.run_block(index, t)
    loss = softmax_cross_entropy(t @ model.head[0] + model.head[1], labels)
    peak = stem_tape.saved_bytes + checkpoint_bytes + last_tape.peak_saved_bytes
    last_tape.backward(loss)
    grad = last_input.grad

    # Backward through the other segments: recompute each from its checkpoint, then backprop.
    for segment in reversed(segments[:-1]):
        checkpoint = checkpoints.pop()
        checkpoint_bytes -= int(checkpoint.nbytes)
        tape = Tape()
        segment_input = Tensor(checkpoint, tape, requires_grad=True)
        t = segment_input
        for index in segment:
            t = model.run_block(index, t)
        peak = max(peak, stem_tape.saved_bytes + checkpoint_bytes + tape.peak_saved_bytes)
        tape.backward(t, grad)
        grad = segment_input.grad
    stem_tape.backward(h0, grad)
    return StepStats(float(loss.data), k, int(peak), len(segments) - 1 if segments else 0,
                     model.n_block_forwards - start_count)


def predicted_peak_bytes(n_blocks: int, segment_length: int, block_bytes: float, checkpoint_bytes: float,
                         stem_bytes: float = 0.0, head_bytes: float = 0.0) -> float:
    """Peak activation bytes of :func:`forward_backward`, from the segment layout alone.

    With S = ceil(n/k) segments the peak is the larger of two moments: the last segment on its tape
    with S − 1 checkpoints alive and the head's activations, (S−1)·c + len_last·s + head; and the
    second-to-last segment recomputed with S − 2 checkpoints still alive, (S−2)·c + k·s. The stem's
    saved input (``stem_bytes``) is alive throughout.
    """
    n = check_int("n_blocks", n_blocks, low=1)
    k = check_int("segment_length", segment_length, low=1, high=n_blocks)
    for name, value in (("block_bytes", block_bytes), ("checkpoint_bytes", checkpoint_bytes),
                        ("stem_bytes", stem_bytes), ("head_bytes", head_bytes)):
        check_finite(name, value, low=0.0)
    n_segments = math.ceil(n / k)
    last_length = n - (n_segments - 1) * k
    peak = (n_segments - 1) * checkpoint_bytes + last_length * block_bytes + head_bytes
    if n_segments >= 2:
        peak = max(peak, (n_segments - 2) * checkpoint_bytes + k * block_bytes)
    return peak + stem_bytes


def optimal_segment_length(n_blocks: int, block_bytes: float, checkpoint_bytes: float) -> int:
    """The k that minimises ceil(n/k)·c + k·s, by search (≈ √(n·c/s) from the continuous minimum)."""
    check_int("n_blocks", n_blocks, low=1, high=10**4)  # a search over every k: at most 10**4 of them
    check_finite("block_bytes", block_bytes, low=0.0)
    check_finite("checkpoint_bytes", checkpoint_bytes, low=0.0)
    return min(range(1, n_blocks + 1),
               key=lambda k: predicted_peak_bytes(n_blocks, k, block_bytes, checkpoint_bytes))


def recompute_time_ratio(n_blocks: int, segment_length: int, backward_over_forward: float = 2.0) -> float:
    """Step time with checkpointing over step time without: (F + F·(n−k)/n + B) / (F + B), B = r·F."""
    check_int("n_blocks", n_blocks, low=1)
    k = check_int("segment_length", segment_length, low=1, high=n_blocks)
    check_finite("backward_over_forward", backward_over_forward, low=0.0)
    extra = (n_blocks - k) / n_blocks
    return (1 + extra + backward_over_forward) / (1 + backward_over_forward)


@dataclass(frozen=True)
class CheckpointSweep:
    """:func:`forward_backward` at every segment length k = 1..n: one entry per k in each array."""

    segment_lengths: np.ndarray  # k
    peak_activation_bytes: np.ndarray  # measured on the tapes (StepStats.peak_activation_bytes)
    n_block_forwards: np.ndarray  # n plus the blocks recomputed
    step_seconds: np.ndarray  # median time of one forward + backward

    def __post_init__(self) -> None:
        lengths = check_array("segment_lengths", self.segment_lengths, ndim=1, kinds="iu")
        if (lengths < 1).any():
            raise ValueError(f"segment_lengths must be >= 1 (blocks per segment); got {lengths.min()}")
        n = lengths.size
        for name in ("peak_activation_bytes", "n_block_forwards", "step_seconds"):
            values = check_array(name, getattr(self, name), ndim=1, finite=True)
            if values.shape != (n,) or (values < 0).any():
                raise ValueError(f"{name} must hold {n} numbers >= 0, one per entry of segment_lengths; "
                                 f"got shape {values.shape}")

    @property
    def lowest_peak_segment_length(self) -> int:
        """The k whose step kept the fewest bytes (the smallest such k on a tie)."""
        return int(self.segment_lengths[np.argmin(self.peak_activation_bytes)])

    @property
    def memory_saving(self) -> float:
        """Peak bytes with no recomputation (k = n) over the lowest peak of the sweep."""
        return float(self.peak_activation_bytes[-1] / self.peak_activation_bytes.min())


def checkpoint_sweep(model: MLP, x, labels, *, warmup: int = 1, repeat: int = 3) -> CheckpointSweep:
    """Run and time one checkpointed step of ``model`` on (x, labels) for every segment length k."""
    _check_batch(model, x, labels)
    check_int("warmup", warmup, low=0, high=1000)
    check_int("repeat", repeat, low=1, high=1000)
    n = check_int("the number of model.blocks", len(model.blocks), low=1)  # a sweep over segment lengths needs one
    peaks, forwards, seconds = [], [], []
    for k in range(1, n + 1):
        stats = forward_backward(model, x, labels, k)
        timing = benchmark(lambda k=k: forward_backward(model, x, labels, k), warmup=warmup, repeat=repeat)
        peaks.append(stats.peak_activation_bytes)
        forwards.append(stats.n_block_forwards)
        seconds.append(timing.median)
    return CheckpointSweep(np.arange(1, n + 1), np.array(peaks), np.array(forwards), np.array(seconds))


@dataclass(frozen=True)
class PlanRun:
    """What :func:`simulate_checkpoint_plan` saw: the high-water mark and the forward work redone."""

    peak_bytes: float
    recompute_cost: float  # Σ forward cost of every layer run a second time
    segments: tuple[tuple[int, int], ...]  # (first layer, one past the last) of each segment

    def __post_init__(self) -> None:
        check_finite("peak_bytes", self.peak_bytes, low=0.0)
        check_finite("recompute_cost", self.recompute_cost, low=0.0)
        for segment in check_sequence("segments", self.segments, min_size=1):
            if (not isinstance(segment, (tuple, list)) or len(segment) != 2
                    or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in segment)):
                raise ValueError(f"segments must hold (first, end) pairs of layer indices >= 0; got {segment!r:.40}")


def simulate_checkpoint_plan(activation_bytes, checkpoint_bytes, forward_costs, segment_starts) -> PlanRun:
    """Run a checkpointing plan over a chain of layers, event by event, as :func:`forward_backward` runs it.

    Layer i keeps ``activation_bytes[i]`` on a tape (its input included) and costs ``forward_costs[i]`` to run;
    a segment starting at layer i keeps ``checkpoint_bytes[i]`` (layer i's input) while it waits.
    ``segment_starts`` are the first layers of the segments, ascending, starting at 0 ([0]: no checkpointing).
    Forward: every segment but the last runs without a tape and keeps its checkpoint; the last runs on a tape.
    Backward, last segment first: free its tape; then for each earlier segment, free its checkpoint (its tape
    keeps that input again), re-run it on a tape (its forward cost counted again), backpropagate, free it.
    The peak is the most bytes alive at any moment (checkpoints + the tape being run); for uniform layers it is
    :func:`predicted_peak_bytes`.
    """
    a = check_array("activation_bytes", activation_bytes, ndim=1, finite=True).astype(float)
    x = check_array("checkpoint_bytes", checkpoint_bytes, ndim=1, finite=True).astype(float)
    f = check_array("forward_costs", forward_costs, ndim=1, finite=True).astype(float)
    for name, b in (("checkpoint_bytes", x), ("forward_costs", f)):
        if b.shape != a.shape:
            raise ValueError(f"{name} must have one entry per layer, as activation_bytes ({a.size},); got {b.shape}")
    for name, values in (("activation_bytes", a), ("checkpoint_bytes", x), ("forward_costs", f)):
        if (values < 0).any():
            raise ValueError(f"{name} must be ≥ 0 everywhere; got {values.min():g}")
    starts = [check_int("segment_starts[]", s, low=0, high=a.size - 1) for s in check_sequence(
        "segment_starts", list(segment_starts) if hasattr(segment_starts, "tolist") else segment_starts, min_size=1)]
    if starts[0] != 0 or any(later <= earlier for earlier, later in zip(starts, starts[1:], strict=False)):
        raise ValueError(f"segment_starts must ascend strictly from 0 (0 ≤ start < {a.size}); got {starts}")
    segments = tuple(zip(starts, starts[1:] + [a.size], strict=True))
    live = peak = recompute = 0.0
    for first, _ in segments[:-1]:  # forward without a tape: only the checkpoints stay
        live += x[first]
        peak = max(peak, live)
    first, end = segments[-1]
    for i in range(first, end):  # the last segment on a tape
        live += a[i]
        peak = max(peak, live)
    live -= a[first:end].sum()
    for first, end in reversed(segments[:-1]):
        live -= x[first]
        for i in range(first, end):  # recompute on a tape
            live += a[i]
            recompute += f[i]
            peak = max(peak, live)
        live -= a[first:end].sum()
    return PlanRun(float(peak), float(recompute), segments)
