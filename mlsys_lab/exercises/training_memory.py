"""Checks for the exercises of 06_training_memory."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.training_memory.accounting import (
    training_memory_bytes,
    transformer_layer_activation_bytes,
    transformer_params,
)
from mlsys_lab.training_memory.diff_modes import numerical_gradient
from mlsys_lab.training_memory.quantize import dequantize, quantize
from mlsys_lab.validation import relative_error


def reference_layer_norm_backward(x: np.ndarray, grad_out: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """y = (x − μ)/σ per row, σ = √(var + eps): dx = (g − mean(g) − y·mean(g·y)) / σ."""
    mu = x.mean(axis=1, keepdims=True)
    sigma = np.sqrt(x.var(axis=1, keepdims=True) + eps)
    y = (x - mu) / sigma
    mean_g, mean_gy = grad_out.mean(axis=1, keepdims=True), (grad_out * y).mean(axis=1, keepdims=True)
    return (grad_out - mean_g - y * mean_gy) / sigma


def check_layer_norm_backward(fn) -> None:
    """``fn(x, grad_out)`` -> dL/dx for y = layer_norm(x) (no affine, eps=1e-5), x and grad_out (rows, cols).

    Cases are checked against central differences of L = sum(y · grad_out), not only the formula.
    """
    g = rng()
    cases = []
    shapes = [(1, 4), (3, 5)] + [tuple(int(v) for v in g.integers(2, 10, size=2)) for _ in range(6)]
    for rows, cols in shapes:
        x = g.normal(size=(rows, cols)) * g.uniform(0.5, 3) + g.normal()
        grad_out = g.normal(size=(rows, cols))

        def loss(x_, grad_out=grad_out):
            mu = x_.mean(axis=1, keepdims=True)
            return float(((x_ - mu) / np.sqrt(x_.var(axis=1, keepdims=True) + 1e-5) * grad_out).sum())

        numeric = numerical_gradient(loss, x, step=1e-5)
        expected = reference_layer_norm_backward(x, grad_out)
        if not np.allclose(numeric, expected, rtol=1e-4, atol=1e-6):  # the reference itself is checked
            raise AssertionError("reference layer-norm backward disagrees with central differences")
        cases.append(Case(f"x{(rows, cols)}", (x.copy(), grad_out.copy()), expected=expected))
    check("layer_norm_backward", fn, cases, compare=lambda got, exp: _close(got, exp, 1e-6))


def reference_training_bytes(n_layers: int, hidden: int, n_heads: int, vocab: int, batch: int,
                             seq: int) -> float:
    """Mixed-precision Adam states (16 B/param) + every layer's activations with no recompute."""
    n_params = transformer_params(n_layers, hidden, vocab)
    activations = n_layers * transformer_layer_activation_bytes(batch, seq, hidden, n_heads)
    return training_memory_bytes(n_params, "mixed", "adam", activations).total


def check_training_bytes(fn) -> None:
    """``fn(n_layers, hidden, n_heads, vocab, batch, seq)`` -> bytes of a mixed-precision Adam step (±1%)."""
    cases = [Case("GPT-2 XL, b=1, s=1024", (48, 1600, 25, 50257, 1, 1024),
                  expected=reference_training_bytes(48, 1600, 25, 50257, 1, 1024))]
    g = rng()
    for _ in range(8):
        heads = int(g.choice([8, 16, 32, 64]))
        hidden = heads * int(g.choice([64, 128]))
        args = (int(g.integers(2, 100)), hidden, heads, int(g.integers(1000, 200_000)),
                int(g.integers(1, 32)), int(g.choice([256, 1024, 4096])))
        cases.append(Case(f"L={args[0]}, h={hidden}, a={heads}, V={args[3]}, b={args[4]}, s={args[5]}", args,
                          expected=reference_training_bytes(*args)))
    check("training_bytes", fn, cases, compare=lambda got, exp: _close(got, exp, 1e-2))


def check_quantize_groupwise(fn) -> None:
    """``fn(w, bits, group_size)`` -> w quantized (symmetric, b bits, one scale per group) and back.

    Budgets: each group of ``group_size`` consecutive weights of a row may use at most 2^bits − 1
    distinct values (a symmetric b-bit code), and the relative error must be within 0.1% of round-to-
    nearest with the group's absmax scale.
    """
    g = rng()
    cases = []
    for bits, group in [(8, 32), (4, 16)] + [(int(g.choice([2, 3, 4, 6, 8])), int(g.choice([8, 16, 64])))
                                              for _ in range(6)]:
        shape = (int(g.integers(1, 9)), group * int(g.integers(1, 5)))
        w = (g.standard_normal(shape) * 0.05).astype(np.float32)
        w[0, 0] *= 20  # an outlier: what per-group scales are for
        best = relative_error(dequantize(quantize(w, bits, "symmetric", "group", group)), w)

        def budget(got, w=w, bits=bits, group=group, best=best):
            got = np.asarray(got, dtype=np.float64)
            groups = got.reshape(got.shape[0], -1, group)
            most = max(len(np.unique(row_group)) for row in groups for row_group in row)
            if most > 2 ** bits - 1:
                return f"a group uses {most} distinct values; {bits} symmetric bits give {2 ** bits - 1}"
            error = relative_error(got, w)
            if error > best * 1.001 + 1e-9:
                return f"relative error {error:.4g} exceeds the budget {best:.4g} (round to nearest, absmax)"
            return None

        cases.append(Case(f"bits={bits}, group={group}, w{w.shape}", (w.copy(), bits, group),
                          expected=w.shape, check_result=budget))
    check("quantize_groupwise", fn, cases, compare=lambda got, shape: np.shape(got) == shape)


def _close(got, expected, rtol: float) -> bool:
    try:
        got_arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return False
    exp_arr = np.asarray(expected, dtype=float)
    return got_arr.shape == exp_arr.shape and bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=1e-9))
