"""The capstone in mixed precision: fp32 master weights and Adam, an fp16 gradient, lesson 06's loss scaler.

Measured on CONFIG (one layer, width 32, context 32, 8 sequences a step, 40 steps), against the fp32 run
(:func:`mlsys_lab.capstone.train.train`) on the same batches:

* with no skipped step (GradScaler's 2¹⁶ and interval 2000) the losses stay within 1e-4 nats of the fp32 run's
  (measured: 4.3e-6): rounding the scaled gradient to fp16 barely moves Adam;
* a skipped step is an update the fp32 run takes and this one does not: from 2²⁰ with interval 5, 8 of 40 steps
  are skipped (3 backoffs at the start, then a growth that overflows every few steps) and the losses stay within
  0.3 nats (measured: 0.23);
* at scale 1 about 0.2% of the nonzero gradient entries flush to zero in fp16 (measured 0.20% to 0.25% over 10
  steps): the gradients loss scaling exists for.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.capstone.mixed_precision import flushed_share, fp16_gradient, train_mixed_precision
from mlsys_lab.capstone.model import GPTConfig
from mlsys_lab.capstone.stack import PIECES
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.training_memory.mixed_precision import loss_scaler_step

CONFIG = RunConfig(model=GPTConfig(context=32, d_model=32, n_heads=2, n_layers=1), batch_size=8, lr=3e-3)
N_STEPS = 40
NO_SKIP_GAP = 1e-4  # nats, no step skipped
SKIPPING_GAP = 0.3  # nats, 8 of 40 updates skipped


@pytest.fixture(scope="module")
def fp32_losses() -> np.ndarray:
    return np.array(train(CONFIG, N_STEPS)[1].losses)


def test_without_an_overflow_the_run_tracks_the_fp32_run(fp32_losses):
    state, log = train_mixed_precision(CONFIG, N_STEPS, loss_scaler_step)
    assert log.skipped_steps == [] and set(log.scales) == {2.0 ** 16} and state.step == N_STEPS
    assert np.abs(np.array(log.losses) - fp32_losses).max() <= NO_SKIP_GAP


def test_it_skips_exactly_the_overflowed_steps_and_moves_the_scale_as_gradscaler(fp32_losses):
    seen = []

    def recording(grads16, *args):
        seen.append(grads16.copy())
        return loss_scaler_step(grads16, *args)

    state, log = train_mixed_precision(CONFIG, N_STEPS, recording, init_scale=2.0 ** 20, growth_interval=5)
    overflowed = [not np.isfinite(g).all() for g in seen]
    assert log.skipped == overflowed and 0 < sum(overflowed) < N_STEPS
    assert state.step == N_STEPS - sum(overflowed)  # Adam stepped only on the clean steps
    scale, clean, grew = 2.0 ** 20, 0, False
    for t in range(N_STEPS):  # GradScaler's update, replayed from the skipped steps alone
        assert log.scales[t] == scale, f"step {t}"
        if log.skipped[t]:
            scale, clean = scale / 2, 0
        else:
            clean += 1
            if clean == 5:
                scale, clean, grew = scale * 2, 0, True
    assert grew and min(log.scales) < 2.0 ** 20
    assert np.abs(np.array(log.losses) - fp32_losses).max() <= SKIPPING_GAP


def test_at_scale_one_a_share_of_the_gradient_flushes_to_zero():
    _, log = train_mixed_precision(CONFIG, 10, loss_scaler_step, init_scale=1.0, growth_interval=10**6)
    assert set(log.scales) == {1.0} and log.skipped_steps == []
    assert log.flushed_at_scale == log.flushed_at_one and min(log.flushed_at_one) > 1e-3
    _, scaled = train_mixed_precision(CONFIG, 3, loss_scaler_step)
    assert max(scaled.flushed_at_scale) < min(scaled.flushed_at_one)  # 2¹⁶ keeps most of what scale 1 loses


def test_the_learners_solved_cell_runs_as_the_course_piece(learner):
    theirs = learner.solved("06_training_memory.ipynb", "loss_scaler_step")
    mine, _ = train_mixed_precision(CONFIG, 12, loss_scaler_step, init_scale=2.0 ** 20, growth_interval=3)
    yours, _ = train_mixed_precision(CONFIG, 12, theirs, init_scale=2.0 ** 20, growth_interval=3)
    assert np.array_equal(mine.theta, yours.theta) and mine.step == yours.step
    assert ("loss_scaler_step", "06") in [(name, lesson) for name, lesson, _, _ in PIECES]


def test_the_fp16_gradient_and_the_flushed_share():
    g16 = fp16_gradient(np.array([1.0, 2.0 ** -26, 2.0 ** -45, -0.25], dtype=np.float32), 2.0 ** 17)
    assert g16.dtype == np.float16 and g16.tolist() == [np.inf, 2.0 ** -9, 0.0, -32768.0]  # 131072 > 65504: inf
    assert flushed_share(np.array([0.0, 1e-9, 1.0]), np.array([0.0, 0.0, 1.0], np.float16)) == 0.5
    assert flushed_share(np.zeros(3), np.zeros(3, np.float16)) == 0.0


def test_a_scaler_that_answers_wrongly_is_named():
    with pytest.raises(TypeError, match="scaler_step must return"):
        train_mixed_precision(CONFIG, 1, lambda g, *a: (g, False, 1.0, 0))  # float16 grads, not unscaled
    with pytest.raises(ValueError, match="dtype"):
        train_mixed_precision(RunConfig(model=GPTConfig(dtype="float64")), 1, loss_scaler_step)
