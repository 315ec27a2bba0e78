"""The capstone model's backward against central differences: :func:`gradient_check`."""

from __future__ import annotations

import numpy as np

from mlsys_lab.capstone.model import GPTConfig, ModelOps, _config, count_params, init_theta, loss_and_grad
from mlsys_lab.validation import check_int, check_number


def gradient_check(config: GPTConfig, batch: int = 3, n_coords: int = 200, seed: int = 0, step: float = 1e-6,
                   ops: ModelOps | None = None) -> dict[str, float]:
    """:func:`loss_and_grad` against central differences (L(θ + h·e_i) − L(θ − h·e_i)) / 2h on ``n_coords``
    random coordinates of a perturbed θ (gains and biases moved off 1 and 0), on random tokens. Use float64: in
    float32 the differences drown in rounding. Returns the largest absolute error and the largest |gradient|."""
    _config(config)
    check_int("batch", batch, low=1, high=64)
    check_int("n_coords", n_coords, low=1, high=100_000)
    check_number("step", step, low=0.0, low_inclusive=False, high=1.0)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    theta = init_theta(config, seed) + g.normal(0.0, 0.05, count_params(config)).astype(config.dtype)
    idx = g.integers(0, config.vocab_size, (batch, config.context))
    targets = g.integers(0, config.vocab_size, (batch, config.context))
    _, grad = loss_and_grad(theta, idx, targets, config, ops)
    coords = g.choice(theta.size, size=min(n_coords, theta.size), replace=False)
    errors = []
    for i in coords:
        bump = np.zeros_like(theta)
        bump[i] = step
        numeric = (loss_and_grad(theta + bump, idx, targets, config, ops)[0]
                   - loss_and_grad(theta - bump, idx, targets, config, ops)[0]) / (2 * step)
        errors.append(abs(numeric - grad[i]))
    return {"max_abs_error": float(max(errors)), "max_gradient": float(np.abs(grad).max()),
            "n_checked": int(coords.size)}
