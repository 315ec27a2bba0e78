"""Checks for the exercises of 06_training_memory."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.training_memory.accounting import (
    training_memory_bytes,
    transformer_layer_activation_bytes,
    transformer_params,
)


def reference_layer_norm_backward(x: np.ndarray, grad_out: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """y = (x − μ)/σ per row, σ = √(var + eps): dx = (g − mean(g) − y·mean(g·y)) / σ."""
    mu = x.mean(axis=1, keepdims=True)
    sigma = np.sqrt(x.var(axis=1, keepdims=True) + eps)
    y = (x - mu) / sigma
    mean_g, mean_gy = grad_out.mean(axis=1, keepdims=True), (grad_out * y).mean(axis=1, keepdims=True)
    return (grad_out - mean_g - y * mean_gy) / sigma


def check_layer_norm_backward(fn) -> None:
    """``fn(x, grad_out)`` -> dL/dx for y = layer_norm(x) (no affine, eps=1e-5), x and grad_out (rows, cols).

    The reference agrees with central differences on well-conditioned inputs (``tests/training_memory``).
    The hidden cases add what central differences cannot do: rows with a large common offset (10⁸ + noise,
    where a finite difference of x is swamped by rounding), rows of equal values (σ = √eps), one column.
    Tolerance: max |error| within 10⁻⁶ of the largest |dx|.
    """
    g = rng()
    cases = []
    example_x = np.array([[1.0, 2.0, 3.0, 4.0]])
    example_g = np.array([[1.0, 0.0, 0.0, 0.0]])
    cases.append(Case("the example, x = [[1, 2, 3, 4]], g = [[1, 0, 0, 0]]", (example_x, example_g),
                      expected=reference_layer_norm_backward(example_x, example_g)))
    shapes = [(3, 5)] + [tuple(int(v) for v in g.integers(2, 10, size=2)) for _ in range(4)]
    for rows, cols in shapes:
        x = g.normal(size=(rows, cols)) * g.uniform(0.5, 3) + g.normal()
        grad_out = g.normal(size=(rows, cols))
        cases.append(Case(f"x{(rows, cols)}", (x, grad_out), expected=reference_layer_norm_backward(x, grad_out)))
    for label, rows, cols, offset, spread in [("large offset 1e8", int(g.integers(2, 5)), int(g.integers(4, 12)),
                                               1e8, 1.0),
                                              ("one row of equal values (var = 0)", 1, int(g.integers(3, 9)),
                                               float(g.normal()), 0.0),
                                              ("tiny spread (var << eps)", 2, int(g.integers(3, 9)), 0.5, 1e-4),
                                              ("one column", int(g.integers(2, 6)), 1, 0.0, 1.0)]:
        x = offset + spread * g.normal(size=(rows, cols))
        grad_out = g.normal(size=(rows, cols))
        cases.append(Case(f"{label}, x{(rows, cols)}", (x, grad_out),
                          expected=reference_layer_norm_backward(x, grad_out)))
    check("layer_norm_backward", fn, cases, compare=_close_to_largest)


def _close_to_largest(got, expected, rtol: float = 1e-6) -> bool:
    """Same shape, and max |got − expected| ≤ rtol · max |expected| (errors relative to the array's scale)."""
    try:
        got_arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return False
    exp_arr = np.asarray(expected, dtype=float)
    if got_arr.shape != exp_arr.shape or not np.all(np.isfinite(got_arr)):
        return False
    return bool(np.abs(got_arr - exp_arr).max() <= rtol * np.abs(exp_arr).max() + 1e-12)


def reference_training_bytes(n_layers: int, hidden: int, n_heads: int, vocab: int, batch: int,
                             seq: int) -> float:
    """Mixed-precision Adam states (16 B/param) + every layer's activations with no recompute."""
    n_params = transformer_params(n_layers, hidden, vocab)
    activations = n_layers * transformer_layer_activation_bytes(batch, seq, hidden, n_heads)
    return training_memory_bytes(n_params, "mixed", "adam", activations).total


def check_training_bytes(fn) -> None:
    """``fn(n_layers, hidden, n_heads, vocab, batch, seq)`` -> bytes of a mixed-precision Adam step.

    Exact up to rounding (relative 10⁻⁹): every term counts, the 13·L·h of biases and LayerNorms included.
    Hidden cases: small models (where the small terms are largest), sequence lengths that heads·seq/hidden
    does not divide, the smallest legal sizes.
    """
    cases = [Case("GPT-2 XL, b=1, s=1024", (48, 1600, 25, 50257, 1, 1024),
                  expected=reference_training_bytes(48, 1600, 25, 50257, 1, 1024)),
             Case("smallest: L=1, h=1, a=1, V=1, b=1, s=1", (1, 1, 1, 1, 1, 1),
                  expected=reference_training_bytes(1, 1, 1, 1, 1, 1))]
    g = rng()
    for i in range(8):
        heads = int(g.choice([1, 2, 4, 8, 16, 32]))
        hidden = heads * int(g.choice([8, 16, 64, 128]))
        seq = int(g.integers(1, 4096)) if i % 2 else int(g.choice([256, 1024, 4096]))
        args = (int(g.integers(1, 100)), hidden, heads, int(g.integers(100, 200_000)), int(g.integers(1, 32)), seq)
        cases.append(Case(f"L={args[0]}, h={hidden}, a={heads}, V={args[3]}, b={args[4]}, s={args[5]}", args,
                          expected=reference_training_bytes(*args)))
    check("training_bytes", fn, cases, compare=lambda got, exp: _close(got, exp, 1e-9))


def check_quantize_groupwise(fn) -> None:
    """``fn(w, bits, group_size)`` -> w quantized (symmetric, b bits, one scale per group) and back.

    Each group of ``group_size`` consecutive weights of a row must come back on its own symmetric grid:
    values k·s with s = max|w| of the group / (2^(b−1) − 1) and integers |k| ≤ 2^(b−1) − 1, and every
    weight within half a step, |ŵ − w| ≤ s/2 (round to nearest; either way of breaking a tie is accepted).
    A group of zeros comes back as zeros. Hidden cases: an outlier per weight, groups of zeros, ties.
    """
    g = rng()
    cases = []
    settings = [(8, 32), (4, 16), (2, 4), (8, 8)] + [(int(g.choice([2, 3, 4, 6, 8])), int(g.choice([4, 8, 16, 64])))
                                                     for _ in range(5)]
    for i, (bits, group) in enumerate(settings):
        shape = (int(g.integers(2, 9)), group * int(g.integers(2, 5)))
        w = (g.standard_normal(shape) * 0.05).astype(np.float32)
        w[0, 0] *= 20  # an outlier: what per-group scales are for
        label = f"bits={bits}, group={group}, w{w.shape}"
        if i == 2:  # ties: weights exactly halfway between two grid points of their group
            q_max = 2 ** (bits - 1) - 1
            w[1, :group] = np.float32(0.25) * np.array([q_max, 0.5, -0.5, 0.5 - q_max] * (group // 4), dtype=np.float32)
            label += ", ties at k + 1/2"
        if i == 3:
            w[-1, :] = 0.0
            label += ", a row of zeros"
        cases.append(Case(label, (w.copy(), bits, group), expected=w.shape,
                          check_result=lambda got, w=w, bits=bits, group=group: _groupwise_problem(got, w, bits,
                                                                                                   group)))
    check("quantize_groupwise", fn, cases, compare=lambda got, shape: np.shape(got) == shape)


def _groupwise_problem(got, w: np.ndarray, bits: int, group: int) -> str | None:
    """What is wrong with ``got`` as the symmetric round-to-nearest group-wise quantization of ``w``, or None."""
    got = np.asarray(got, dtype=np.float64)
    if not np.all(np.isfinite(got)):
        return "the result has NaN or infinite values (a group of zeros has scale 0: return zeros)"
    q_max = 2 ** (bits - 1) - 1
    w_groups = w.astype(np.float64).reshape(w.shape[0], -1, group)
    got_groups = got.reshape(w_groups.shape)
    scale = np.abs(w_groups).max(axis=2, keepdims=True) / q_max
    safe = np.where(scale == 0, 1.0, scale)
    k = got_groups / safe
    off_grid = (np.abs(k - np.round(k)) > 1e-3) | (np.abs(np.round(k)) > q_max) | ((scale == 0) & (got_groups != 0))
    if off_grid.any():
        r, grp, j = (int(v) for v in np.argwhere(off_grid)[0])
        return (f"row {r}, group {grp}: {got_groups[r, grp, j]:.6g} is not k·s with s = absmax/{q_max} = "
                f"{scale[r, grp, 0]:.6g} and an integer |k| ≤ {q_max}")
    too_far = np.abs(got_groups - w_groups) > scale / 2 * (1 + 1e-4) + 1e-12
    if too_far.any():
        r, grp, j = (int(v) for v in np.argwhere(too_far)[0])
        return (f"row {r}, group {grp}: {w_groups[r, grp, j]:.6g} came back as {got_groups[r, grp, j]:.6g}, "
                f"more than half a step (s/2 = {scale[r, grp, 0] / 2:.6g}) away: not round to nearest")
    return None


def _close(got, expected, rtol: float) -> bool:
    try:
        got_arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return False
    exp_arr = np.asarray(expected, dtype=float)
    return got_arr.shape == exp_arr.shape and bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=1e-9))
