"""Wrong answers lesson 06's loss_scaler_step check must reject on every seed (tests/catalogue.py runs them)."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.training_memory import check_loss_scaler_step
from mlsys_lab.exercises.training_memory_references import reference_loss_scaler_step

EXAMPLE = (np.array([1.0, 3.0, -2.0 ** -12], dtype=np.float16), 65536.0, 1, 2.0, 0.5, 2)


def _step(grads16, scale, good_steps, growth_factor, backoff_factor, growth_interval, *, unscale="reciprocal",
          finite=np.isfinite, reset=True, grow_before_count=False, backoff_counter=False, fixed_factors=False,
          back_off=True):
    """GradScaler's step with one slip: how the gradients are unscaled, what counts as an overflow, the counter."""
    if fixed_factors:
        growth_factor, backoff_factor = 2.0, 0.5
    g32 = grads16.astype(np.float32)
    grads = {"reciprocal": lambda: g32 * np.float32(1.0 / scale),
             "divide": lambda: g32 / np.float32(scale),
             "float64": lambda: (grads16.astype(np.float64) / scale).astype(np.float32),
             "fp16": lambda: (grads16 * np.float16(1.0 / scale)).astype(np.float32),
             "none": lambda: g32}[unscale]()
    if not finite(grads16).all():
        new_good = good_steps if not reset else int(good_steps * backoff_factor) if backoff_counter else 0
        return grads, True, scale * backoff_factor if back_off else scale, new_good
    if grow_before_count:  # compares the count before adding this step: grows one clean step late
        return (grads, False, scale * growth_factor, 0) if good_steps == growth_interval else \
            (grads, False, scale, good_steps + 1)
    if good_steps + 1 == growth_interval:
        return grads, False, scale * growth_factor, 0
    return grads, False, scale, good_steps + 1


def _special_cased_example(*args):
    """The prompt's example answered by rote; everything else unscaled in fp16."""
    if len(args) == 6 and np.array_equal(args[0], EXAMPLE[0]) and args[1:] == EXAMPLE[1:]:
        return (np.array([1.5258789e-05, 4.5776367e-05, -3.7252903e-09], dtype=np.float32), False, 131072.0, 0)
    return _step(*args, unscale="fp16")


CATALOGUES = [
    Catalogue("loss_scaler_step", check_loss_scaler_step, reference_loss_scaler_step, {
        "unscales in float16 (small gradients flush, large ones overflow)": lambda *a: _step(*a, unscale="fp16"),
        "returns the gradients still scaled": lambda *a: _step(*a, unscale="none"),
        "divides by the scale (GradScaler multiplies by the fp32 reciprocal)": lambda *a: _step(*a, unscale="divide"),
        "unscales in float64, returns float32 of the quotient": lambda *a: _step(*a, unscale="float64"),
        "found_inf sees inf only, not NaN": lambda *a: _step(*a, finite=lambda g: ~np.isinf(g)),
        "does not restart the counter on an overflow": lambda *a: _step(*a, reset=False),
        "backs the counter off (× backoff_factor) instead of restarting it": lambda *a: _step(*a, backoff_counter=True),
        "checks growth before counting this step (grows one step late)": lambda *a: _step(*a, grow_before_count=True),
        "never backs off on an overflow": lambda *a: _step(*a, back_off=False),
        "always ×2 and ×0.5 (ignores the factors)": lambda *a: _step(*a, fixed_factors=True),
        "the example special-cased, fp16 unscaling elsewhere": _special_cased_example,
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
