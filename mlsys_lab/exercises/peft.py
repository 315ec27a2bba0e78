"""Checks for the exercises of 10_peft: a LoRA layer's forward and merge, and LoRA parameter counts."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.peft.accounting import lora_params_for_shapes


def reference_lora_forward(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray,
                           scale: float) -> np.ndarray:
    # h = x W0 + s · (x A) B: the low-rank path never forms the d_in × d_out product A B
    return x @ w + scale * ((x @ a) @ b)


def reference_lora_merge(w: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    return w + scale * (a @ b)


def _layer_case(g: np.random.Generator, zero_b: bool = False) -> tuple[str, tuple]:
    n, d_in, d_out, r = (int(g.integers(low, high)) for low, high in ((1, 9), (2, 40), (2, 40), (1, 5)))
    r = min(r, d_in, d_out)
    x, w = g.normal(size=(n, d_in)), g.normal(size=(d_in, d_out))
    a = g.normal(size=(d_in, r))
    b = np.zeros((r, d_out)) if zero_b else g.normal(size=(r, d_out))
    scale = float(g.choice([0.5, 1.0, 2.0, 16 / r]))
    label = f"x {x.shape}, W {w.shape}, r={r}, scale={scale:g}" + (", B = 0" if zero_b else "")
    return label, (x, w, a, b, scale)


def _large_base_case(g: np.random.Generator) -> tuple[str, tuple]:
    """A base whose entries are ~2⁴⁰ and cancel exactly in x W₀, beside an O(1) low-rank update.

    x W₀ + s (x A) B is then exact, while W₀ + s·A·B rounds the update to W₀'s spacing (2⁻¹²): the merged
    matrix cannot hold a small update to a large weight (the reason merged low-precision weights lose LoRA).
    """
    n, half, d_out, r = int(g.integers(1, 5)), int(g.integers(2, 12)), int(g.integers(2, 20)), int(g.integers(1, 4))
    m = g.integers(1, 5, size=(half, d_out)) * g.choice([-1.0, 1.0], size=(half, d_out))
    w = np.empty((2 * half, d_out))
    w[0::2], w[1::2] = m * 2.0 ** 40, -m * 2.0 ** 40  # rows in ± pairs
    x = np.repeat(g.integers(-4, 5, size=(n, half)).astype(float), 2, axis=1)  # equal entries in each pair
    a, b = g.normal(size=(2 * half, r)), g.normal(size=(r, d_out))
    return f"x {x.shape}, W₀ {w.shape} with entries ~2^40 that cancel in x W₀, r={r}", (x, w, a, b, 2.0)


def check_lora_forward(fn) -> None:
    """``fn(x, w, a, b, scale)`` -> x W + scale · (x A) B; with B = 0 it must equal x W exactly.

    One hidden case has a base of large entries that cancel in x W₀ (exactly, in floating point) beside an
    O(1) update: forming W₀ + s·A·B first rounds the update away there, so only the factored path passes.
    """
    g = rng()
    cases = []
    for i in range(10):
        label, args = _layer_case(g, zero_b=(i == 0))
        cases.append(Case(label, args, expected=reference_lora_forward(*args)))
    for _ in range(2):
        label, args = _large_base_case(g)
        cases.append(Case(label, args, expected=reference_lora_forward(*args)))
    check("lora_forward", fn, cases)


def check_lora_merge(fn) -> None:
    """``fn(w, a, b, scale)`` -> the merged weight; x @ merged must equal the unmerged forward."""
    g = rng()
    cases = []
    for _ in range(10):
        label, (x, w, a, b, scale) = _layer_case(g)

        def same_outputs(merged, x=x, w=w, a=a, b=b, scale=scale):
            unmerged = reference_lora_forward(x, w, a, b, scale)
            ok = np.allclose(x @ np.asarray(merged), unmerged, rtol=1e-9, atol=1e-9)
            return None if ok else "x @ merged differs from x W + s (x A) B"

        cases.append(Case(label, (w, a, b, scale), expected=reference_lora_merge(w, a, b, scale),
                          check_result=same_outputs))
    check("lora_merge", fn, cases)


def check_lora_param_count(fn) -> None:
    """``fn(shapes, rank, n_layers)`` -> LoRA parameters for (d_in, d_out) weights in every layer."""
    cases = [Case("GPT-3 175B, W_q and W_v, r=4", ([(12288, 12288)] * 2, 4, 96), expected=18_874_368),
             Case("GPT-3 175B, W_q and W_v, r=1", ([(12288, 12288)] * 2, 1, 96), expected=4_718_592)]
    g = rng()
    for _ in range(8):
        shapes = [(int(g.integers(1, 9000)), int(g.integers(1, 9000))) for _ in range(int(g.integers(1, 8)))]
        rank, n_layers = int(g.integers(1, 128)), int(g.integers(1, 100))
        cases.append(Case(f"{len(shapes)} shapes, r={rank}, {n_layers} layers", (shapes, rank, n_layers),
                          expected=lora_params_for_shapes(shapes, rank, n_layers)))
    check("lora_param_count", fn, cases)
