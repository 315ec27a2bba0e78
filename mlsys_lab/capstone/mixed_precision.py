"""Mixed-precision training of the capstone's transformer: fp32 master weights, an fp16 gradient, dynamic loss scaling.

The master θ and Adam's m and v stay in float32 (:func:`mlsys_lab.capstone.train.adam_update`, as the fp32 run).
Each step computes the gradient of the loss in float32 (:func:`~mlsys_lab.capstone.model.loss_and_grad`), multiplies
it by the scale (the gradient a scaled loss gives) and stores it in float16: what an fp16 backward hands the
optimizer, entries above 65504 inf and below 2⁻²⁵ zero. ``scaler_step`` (lesson 06's ``loss_scaler_step``: the
learner's where their check passed, :mod:`.stack`) unscales it in float32, finds inf/NaN and moves the scale; a step
whose gradient overflowed is skipped (no Adam step, as ``GradScaler.step`` skips ``optimizer.step``), and its batch
is spent all the same: the batch of step t is :func:`~mlsys_lab.capstone.text.global_batch` of t, as in the fp32 run.

The log says why loss scaling exists: of the gradient entries that are nonzero in float32, the share that would flush
to zero stored in float16 at scale 1, and the share that does at the scale used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mlsys_lab.capstone.model import ModelOps, loss_and_grad
from mlsys_lab.capstone.text import global_batch
from mlsys_lab.capstone.train import RunConfig, TrainState, adam_update, fresh_run, splits
from mlsys_lab.training_memory.mixed_precision import FP32_MAX, MIN_LOSS_SCALE, to_float16
from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_finite,
    check_int,
    check_number,
    check_sequence,
    check_type,
)


@dataclass
class MixedPrecisionLog:
    """What a mixed-precision run measured, one entry per step.

    ``losses``: the float32 loss at the step's θ (nats, before its update); ``scales``: the scale the step's gradient
    was computed with; ``skipped``: whether the scaler found inf/NaN (no Adam step); ``flushed_at_one`` and
    ``flushed_at_scale``: of the gradient's nonzero float32 entries, the share that float16 stores as zero at scale 1
    and at the step's scale; ``seconds``: the wall-clock time of the steps.
    """

    losses: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    flushed_at_one: list[float] = field(default_factory=list)
    flushed_at_scale: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("losses", "scales", "skipped", "flushed_at_one", "flushed_at_scale"):
            setattr(self, name, check_sequence(name, getattr(self, name)))
        for loss in self.losses:
            check_finite("losses", loss, low=0.0)  # cross-entropies: nats, never negative
        for scale in self.scales:
            check_number("scales", scale, low=MIN_LOSS_SCALE, high=FP32_MAX)
        for skipped in self.skipped:
            check_bool("skipped", skipped)
        for name in ("flushed_at_one", "flushed_at_scale"):
            for share in getattr(self, name):
                check_number(name, share, low=0.0, high=1.0)
        check_finite("seconds", self.seconds, low=0.0)

    @property
    def skipped_steps(self) -> list[int]:
        """The steps whose update was skipped."""
        return [t for t, skipped in enumerate(self.skipped) if skipped]


def fp16_gradient(grad: np.ndarray, scale: float) -> np.ndarray:
    """``scale`` × ``grad`` (a finite float array) stored in float16, rounded once from the exact product: the
    gradient an fp16 backward of the scaled loss hands over (above 65504 inf, below 2⁻²⁵ zero)."""
    grad = check_array("grad", grad, kinds="f", min_size=0, finite=True)
    if grad.ndim == 0:
        raise ValueError(f"grad must be an array of a gradient's entries, not a single number; got {grad!r}")
    scale = check_number("scale", scale, low=MIN_LOSS_SCALE, high=FP32_MAX)
    with np.errstate(over="ignore"):
        return (np.asarray(grad, dtype=np.float64) * scale).astype(np.float16)


def flushed_share(grad: np.ndarray, grad16: np.ndarray) -> float:
    """Of the nonzero entries of ``grad``, the share whose float16 counterpart in ``grad16`` is zero (0 when none is
    nonzero)."""
    nonzero = check_array("grad", grad, kinds="f", min_size=0) != 0
    if check_array("grad16", grad16, kinds="f", min_size=0).shape != nonzero.shape:
        raise ValueError(f"grad16 must have grad's shape {nonzero.shape}; got {np.shape(grad16)}")
    count = int(nonzero.sum())
    return float(np.count_nonzero(np.asarray(grad16)[nonzero] == 0) / count) if count else 0.0


def train_mixed_precision(config: RunConfig, n_steps: int, scaler_step: Callable, init_scale: float = 2.0 ** 16,
                          growth_factor: float = 2.0, backoff_factor: float = 0.5, growth_interval: int = 2000,
                          ops: ModelOps | None = None) -> tuple[TrainState, MixedPrecisionLog]:
    """``n_steps`` of the fp32 run's batches (:func:`mlsys_lab.capstone.train.train`) in mixed precision.

    ``scaler_step(grads16, scale, good_steps, growth_factor, backoff_factor, growth_interval)`` ->
    ``(grads, found_inf, new_scale, new_good_steps)``: lesson 06's ``loss_scaler_step`` (``GradScaler``'s defaults:
    scale 2¹⁶, ×2 after 2000 clean steps, ×0.5 on an overflow). ``state.step`` of the returned state counts the Adam
    steps taken: ``n_steps`` less the skipped ones.
    """
    check_type("config", config, RunConfig)
    if config.model.dtype != "float32":
        raise ValueError(f"config.model.dtype must be 'float32' (the master weights of mixed precision); got "
                         f"{config.model.dtype!r}")
    check_int("n_steps", n_steps, low=0, high=10**6)
    if not callable(scaler_step):
        raise TypeError(f"scaler_step must be a function (as loss_scaler_step); got {type(scaler_step).__name__}")
    scale = check_number("init_scale", init_scale, low=MIN_LOSS_SCALE, high=FP32_MAX)
    check_finite("growth_factor", growth_factor, low=1.0, low_inclusive=False)
    check_number("backoff_factor", backoff_factor, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    check_int("growth_interval", growth_interval, low=1)
    state, (tokens, _), log, good_steps = fresh_run(config), splits(), MixedPrecisionLog(), 0
    start = time.perf_counter()
    for t in range(n_steps):
        x, y = global_batch(tokens, t, config.batch_size, config.model.context, config.data_seed)
        loss, grad = loss_and_grad(state.theta, x, y, config.model, ops)
        grad16 = fp16_gradient(grad, scale)
        log.losses.append(loss)
        log.scales.append(scale)
        log.flushed_at_one.append(flushed_share(grad, to_float16(grad)))
        log.flushed_at_scale.append(flushed_share(grad, grad16))
        grads, found_inf, scale, good_steps = _scaler_result(
            scaler_step(grad16, scale, good_steps, growth_factor, backoff_factor, growth_interval), grad.shape)
        log.skipped.append(found_inf)
        if not found_inf:
            adam_update(state, grads, config.lr)
            state.step += 1
    log.seconds = time.perf_counter() - start
    return state, log


def _scaler_result(result, shape: tuple) -> tuple[np.ndarray, bool, float, int]:
    """The scaler's (grads, found_inf, new_scale, new_good_steps), checked: a wrong kind of answer is named here."""
    if not isinstance(result, (tuple, list)) or len(result) != 4:
        raise TypeError(f"scaler_step must return (grads, found_inf, new_scale, new_good_steps); got "
                        f"{type(result).__name__} {result!r:.60}")
    grads, found_inf, new_scale, new_good_steps = result
    if not isinstance(grads, np.ndarray) or grads.dtype != np.float32 or grads.shape != shape:
        raise TypeError(f"scaler_step must return grads as a float32 array of shape {shape}; got "
                        f"{getattr(grads, 'dtype', type(grads).__name__)} {np.shape(grads)}")
    new_scale = check_number("the scaler's new_scale", new_scale, low=MIN_LOSS_SCALE, high=FP32_MAX)
    return grads, bool(found_inf), new_scale, check_int("the scaler's new_good_steps", new_good_steps, low=0)
