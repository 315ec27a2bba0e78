"""Checks for the exercises of 06_training_memory."""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, check, rng, short
from mlsys_lab.exercises.training_memory_cuda import check_softmax_xent_cuda  # noqa: F401  (re-exported: the lesson's checks)
from mlsys_lab.training_memory.accounting import (
    training_memory_bytes,
    transformer_layer_activation_bytes,
    transformer_params,
)
from mlsys_lab.training_memory.recompute import simulate_checkpoint_plan


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


# --- exercise 4: dynamic loss scaling -------------------------------------------------------------------------

def check_loss_scaling(fn) -> None:
    """``fn(backward, weights, lr, n_steps, init_scale, growth_factor, backoff_factor, growth_interval)`` -> dict.

    Runs the learner's loop over fp16 gradient streams (:class:`training_memory_references.Fp16Backward`) with
    underflowing coordinates (10⁻⁹: zero in fp16 unless scaled), overflow spikes and NaN steps, and compares with
    GradScaler's semantics: the scale ``backward`` was really called with at each step (recorded here), the
    returned ``scales`` and ``skipped``, and the fp32 master weights (each entry within 10⁻⁴ of its own size).
    Hidden cases: a NaN while the growth counter is part-way (the counter must restart), growth and backoff
    factors other than 2 and 0.5, growth_interval 1, a stream with no overflow at all.
    """
    from mlsys_lab.exercises.training_memory_references import Fp16Backward, loss_scaling_stream, reference_loss_scaling

    g = rng()
    cases = []

    def add_case(label, grads, nan_steps, size, lr, settings):
        weights = (size * lr * g.uniform(-3, 3, size=grads.shape[1])).astype(np.float32)
        expected = reference_loss_scaling(Fp16Backward(grads, nan_steps), weights, lr, len(grads), *settings)
        backward = Fp16Backward(grads, nan_steps)
        entry_size = size * lr * len(grads)  # each master weight's own scale: what its updates add up to

        def diverged(grads=grads, nan_steps=nan_steps, weights=weights, lr=lr, settings=settings, size=size):
            return _first_diverging_step(fn, grads, nan_steps, weights, lr, settings, size)

        cases.append(Case(label, (backward, weights.copy(), lr, len(grads), *settings), expected=expected,
                          check_result=lambda got, b=backward, e=expected, s=entry_size, d=diverged:
                          _scaling_problem(got, b, e, s, d)))

    example = np.full((6, 2), 1e-3)
    example[1, 0] = 100.0  # × 1024 = 102,400 > 65,504: inf in fp16
    add_case("the example: init 1024, interval 2, a spike at step 1", example, frozenset(), np.full(2, 1e-3), 1.0,
             (1024.0, 2.0, 0.5, 2))
    # A NaN when the counter stands at 2 of 3, then clean steps: growth comes 3 clean steps after the NaN.
    grads, _, size = loss_scaling_stream(g, 16, 6, 0, 0)
    add_case("NaN at step 2 of a growth interval of 3", grads, frozenset({2, 9}), size, 0.1, (2.0 ** 12, 2.0, 0.5, 3))
    for i in range(6):
        n_steps, d = int(g.integers(24, 48)), int(g.integers(4, 24))
        grads, nan_steps, size = loss_scaling_stream(g, n_steps, d, int(g.integers(1, 4)), int(g.integers(1, 3)))
        growth, backoff = (2.0, 0.5) if i < 3 else (4.0, 0.25)
        interval = [1, 2, 3, 5, 4, 2][i]
        init = 2.0 ** int(g.integers(10, 17))
        add_case(f"{n_steps} steps of {d} gradients, init 2^{int(np.log2(init))}, growth ×{growth:g}, backoff "
                 f"×{backoff:g}, interval {interval}", grads, nan_steps, size, float(g.choice([0.1, 1.0])),
                 (init, growth, backoff, interval))
    grads, _, size = loss_scaling_stream(g, 20, 8, 0, 0)
    add_case("no overflow in 20 steps, interval 4", np.minimum(np.abs(grads), 1e-4) * np.sign(grads), frozenset(),
             np.minimum(size, 1e-4), 0.5, (2.0 ** 8, 2.0, 0.5, 4))
    check("loss_scaling", fn, cases, compare=lambda got, exp: True)


def _first_diverging_step(fn, grads, nan_steps, weights, lr, settings, size) -> int | None:
    """The first step after which the learner's master weights differ from GradScaler's: the learner's loop rerun
    on the case's first 1, 2, ... steps (a fresh backward each time), each compared with the reference's."""
    from mlsys_lab.exercises.training_memory_references import Fp16Backward, reference_loss_scaling

    for n in range(1, len(grads) + 1):
        want = reference_loss_scaling(Fp16Backward(grads, nan_steps), weights, lr, n, *settings)["weights"]
        try:
            got = np.asarray(fn(Fp16Backward(grads, nan_steps), weights.copy(), lr, n, *settings)["weights"],
                             dtype=float)
        except Exception:  # the learner's loop fails on a prefix: no step to name
            return None
        if got.shape != want.shape or not np.all(np.abs(got - want) <= 1e-4 * size * lr * n):
            return n - 1
    return None


def _scaling_problem(got, backward, expected, size, diverged=lambda: None) -> str | None:
    if not isinstance(got, dict) or not {"weights", "scales", "skipped"} <= set(got):
        return f"return a dict with 'weights', 'scales' and 'skipped'; got {type(got).__name__}"
    want = expected["scales"]
    steps = [step for step, _ in backward.calls]
    if steps != list(range(len(want))):
        return f"call backward(step, scale) once per step, steps 0, 1, 2, ...; it was called for steps {steps[:12]}"
    for t, ((_, used), scale) in enumerate(zip(backward.calls, want, strict=True)):
        if used != scale:
            return f"step {t}: backward was called with scale {used:g}; GradScaler's scale there is {scale:g}"
    for key, kind in (("scales", float), ("skipped", bool)):
        got_list = [kind(v) for v in list(got[key])]
        if got_list != expected[key]:
            bad = next((t for t, (a, b) in enumerate(zip(got_list, expected[key], strict=False)) if a != b),
                       min(len(got_list), len(expected[key])))
            return (f"{key} differs from step {bad}: got {short(got_list[bad:bad + 4])}, "
                    f"expected {short(expected[key][bad:bad + 4])}")
    try:
        weights = np.asarray(got["weights"], dtype=float)
    except (TypeError, ValueError):
        return "weights must be an array of numbers"
    exp_w = expected["weights"].astype(float)
    if weights.shape != exp_w.shape:
        return f"weights have shape {weights.shape}; expected {exp_w.shape}"
    bad = ~(np.abs(weights - exp_w) <= 1e-4 * size)
    if bad.any():
        j = int(np.argmax(bad))
        step = diverged()
        where = ("" if step is None else f": they first differ from GradScaler's after step {step}, where the scales "
                 "and skipped steps still agree (the update or the unscale is wrong there, not the case's theme)")
        return f"master weight {j} is {weights[j]:.6g}; expected {exp_w[j]:.6g}{where}"
    return None


# --- exercise 4b: one step of the loss scaler (the capstone's mixed-precision run runs it) ----------------------

def check_loss_scaler_step(fn) -> None:
    """``fn(grads16, scale, good_steps, growth_factor, backoff_factor, growth_interval)`` ->
    ``(grads, found_inf, new_scale, new_good_steps)``, one step of PyTorch's GradScaler (``unscale_``, ``update``).

    grads must be float32 and equal the reference bit for bit: float32(grads16) × float32(1/scale), the reciprocal
    rounded once, as GradScaler multiplies (NaN where it has NaN; unscaled even on an overflow). Hidden cases: an inf
    or a NaN part-way through a growth interval, the counter at interval − 1, growth_interval 1, growth and backoff
    ×4/×0.25 and ×1.5/×0.75, a scale below 1 (unscaled in fp16 the entries overflow) and of 2²⁴ (they flush), a scale
    of 3·2^k (dividing by it changes bits), fp16 subnormals and signed zeros.
    """
    from mlsys_lab.exercises.training_memory_references import (
        loss_scaler_cases,
        reference_loss_scaler_step,
        scaler_step_problem,
    )

    cases = []
    for label, args in loss_scaler_cases(rng()):
        expected = reference_loss_scaler_step(*args)
        cases.append(Case(label, args, expected=expected,
                          check_result=lambda got, e=expected: scaler_step_problem(got, e)))
    check("loss_scaler_step", fn, cases, compare=lambda got, exp: True)


# --- exercise 5: a checkpointing plan under a memory budget ------------------------------------------------------

def check_checkpoint_plan(fn) -> None:
    """``fn(activation_bytes, checkpoint_bytes, forward_costs, budget_bytes)`` -> segment starts, or None.

    Each answer is *run* through :func:`mlsys_lab.training_memory.recompute.simulate_checkpoint_plan`: its peak must
    fit the budget and its recompute must equal the least any plan achieves (a DP on the grading side); when no
    plan fits, the answer must be None. Hidden cases on chains of uneven layers (an attention-like layer that keeps
    much more, cheap and costly layers): the budget exactly at the least feasible peak, one byte below it
    (infeasible), exactly at the optimum's peak, where no checkpointing fits, and a chain of one layer.
    """
    from mlsys_lab.exercises.training_memory_references import (
        least_feasible_budget,
        plan_problem,
        reference_checkpoint_plan,
    )

    g = rng()
    cases = []

    def add_case(label, a, x, f, budget):
        a, x, f = (np.asarray(v, dtype=np.int64) for v in (a, x, f))
        optimum = reference_checkpoint_plan(a, x, f, budget)
        cases.append(Case(f"{label}, budget {budget}", (a.copy(), x.copy(), f.copy(), int(budget)), expected=optimum,
                          check_result=lambda got, a=a, x=x, f=f, b=budget, o=optimum:
                          plan_problem(got, a, x, f, b, o)))

    add_case("the example: 6 layers of 10 B, checkpoints 2 B, cost 1", [10] * 6, [2] * 6, [1] * 6, 34)
    add_case("one layer", [int(g.integers(5, 50))], [1], [3], 60)
    add_case("one layer that does not fit", [70], [1], [3], 69)
    for i in range(7):
        n = int(g.integers(5, 13))
        a = g.integers(8, 40, size=n)
        a[g.integers(n)] *= int(g.integers(3, 6))  # an attention-like layer that keeps much more
        x = np.maximum(1, (a * g.uniform(0.05, 0.6, size=n)).astype(np.int64))
        f = g.integers(1, 10, size=n)
        least = least_feasible_budget(a, x, f)
        total = int(a.sum())
        kind = i % 4
        if kind == 0:
            budget, label = least, "the least feasible budget"
        elif kind == 1:
            budget, label = least - 1, "one byte below the least feasible budget"
        elif kind == 2:
            mid = int(g.integers(least, total))
            budget = int(simulate_checkpoint_plan(a, x, f, reference_checkpoint_plan(a, x, f, mid)).peak_bytes)
            label = "exactly the optimum's peak"
        else:
            budget, label = int(g.integers(least, total)), "a budget between"
        add_case(f"{n} layers, A={a.tolist()}, C={x.tolist()}, F={f.tolist()}, {label}", a, x, f, budget)
    a = g.integers(8, 40, size=6)
    add_case("no checkpointing fits (budget = Σ A)", a, np.maximum(1, a // 4), g.integers(1, 10, size=6), int(a.sum()))
    check("checkpoint_plan", fn, cases, compare=lambda got, exp: True)


# --- exercise 6: softmax cross-entropy, a fused operator with its VJP ------------------------------------------

def check_softmax_cross_entropy(fn) -> None:
    """``fn(logits, labels, label_smoothing, grad_out)`` -> (per-row losses (B,), dL/dlogits (B, C)).

    Compared with the engine's reverse pass through the primitive operations
    (:func:`mlsys_lab.training_memory.autodiff.composed_softmax_cross_entropy`) to float64 round-off: losses within
    10⁻¹² of max(1, the row's largest |logit|), gradients within 10⁻¹² of max |grad_out|. Central differences do
    not get within 10⁻¹¹. Hidden cases: logits up to 10⁴ (exp overflows unless the row max is subtracted, and
    log(softmax) is −inf unless computed as z − LSE), label smoothing 0 and not, a row of equal logits, two
    classes, one row, a zero upstream gradient on some rows.
    """
    from mlsys_lab.exercises.training_memory_references import reference_softmax_cross_entropy, sce_problem

    g = rng()
    cases = []

    def add_case(label, logits, labels, smoothing, grad_out):
        logits = np.asarray(logits, dtype=np.float64)
        labels = np.asarray(labels, dtype=np.int64)
        grad_out = np.asarray(grad_out, dtype=np.float64)
        expected = reference_softmax_cross_entropy(logits, labels, smoothing, grad_out)
        cases.append(Case(label, (logits.copy(), labels.copy(), float(smoothing), grad_out.copy()), expected=expected,
                          check_result=lambda got, z=logits, go=grad_out, e=expected: sce_problem(got, z, go, e)))

    add_case("the example: z = [[2, 1, 0]], label 0, ε = 0, g = [1]", [[2.0, 1.0, 0.0]], [0], 0.0, [1.0])
    for scale, smoothing in [(3.0, 0.0), (3.0, 0.1), (1e3, 0.0), (1e4, round(float(g.uniform(0.05, 0.3)), 3))]:
        batch, classes = int(g.integers(2, 9)), int(g.integers(2, 12))
        logits = scale * g.standard_normal((batch, classes)) + g.normal() * scale
        labels = g.integers(0, classes, size=batch)
        grad_out = g.standard_normal(batch)
        grad_out[0] = 0.0
        add_case(f"logits ~{scale:g}, B={batch}, C={classes}, ε={smoothing}", logits, labels, smoothing, grad_out)
    add_case("a row of equal logits (p uniform), ε = 0.2", np.full((2, 5), 7.0), [1, 4], 0.2, g.standard_normal(2))
    add_case("two classes, one row, logits ±800", [[800.0, -800.0]], [1], 0.0, [float(g.uniform(0.5, 2))])
    batch = int(g.integers(2, 6))
    add_case("label at the row max of large logits", 1e4 * np.eye(batch, 4), np.arange(batch) % 4, 0.0,
             g.standard_normal(batch))
    check("softmax_cross_entropy", fn, cases, compare=lambda got, exp: True)
