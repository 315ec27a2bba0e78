"""References and hidden cases of lesson 06's build exercises (loss scaler, checkpoint plan, fused cross-entropy).

The checks themselves are in :mod:`mlsys_lab.exercises.training_memory`; this module holds what they compare
against, on the grading side only (a graded worker may not import ``mlsys_lab.exercises``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from mlsys_lab import backend
from mlsys_lab.exercises import short
from mlsys_lab.training_memory.autodiff import Tape, Tensor, composed_softmax_cross_entropy
from mlsys_lab.training_memory.mixed_precision import loss_scaler_step
from mlsys_lab.training_memory.recompute import simulate_checkpoint_plan

FP16_MAX = float(np.finfo(np.float16).max)  # 65504


# --- dynamic loss scaling --------------------------------------------------------------------------------------

class Fp16Backward:
    """The backward of a model whose gradients are computed in fp16: ``backward(step, scale)``.

    Returns float16 gradients of ``scale · loss`` at ``step``: fp16(scale · g_true[step]), so entries above 65504
    become inf and entries below 2⁻²⁴ ≈ 6·10⁻⁸ flush to zero; ``nan_steps`` return a NaN whatever the scale (a bad
    batch). Records every call, so the check sees which scale the learner really used.
    """

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"__call__"})

    def __init__(self, true_grads: np.ndarray, nan_steps: frozenset[int] = frozenset()) -> None:
        self._grads = np.asarray(true_grads, dtype=np.float64)  # (n_steps, d)
        self._nan_steps = frozenset(nan_steps)
        self.calls: list[tuple[int, float]] = []

    def __call__(self, step, scale):
        step, scale = int(step), float(scale)
        self.calls.append((step, scale))
        if not 0 <= step < len(self._grads):
            raise IndexError(f"step must be in 0..{len(self._grads) - 1}; got {step}")
        with np.errstate(over="ignore"):
            out = (scale * self._grads[step]).astype(np.float16)
        if step in self._nan_steps:
            out[step % out.size] = np.nan
        return out


def reference_loss_scaling(backward, weights, lr, n_steps, init_scale=2.0 ** 16, growth_factor=2.0,
                           backoff_factor=0.5, growth_interval=2000):
    """GradScaler's loop (Micikevicius et al. 2018; PyTorch ``torch.amp.GradScaler``) over fp32 master weights:
    one :func:`reference_loss_scaler_step` a step, the update skipped on inf/NaN."""
    w = np.array(weights, dtype=np.float32)
    scale, clean, scales, skipped = float(init_scale), 0, [], []
    for step in range(n_steps):
        grads16 = np.asarray(backward(step, scale))  # gradients of scale · loss, in fp16
        scales.append(scale)
        grads, found_inf, scale, clean = reference_loss_scaler_step(grads16, scale, clean, growth_factor,
                                                                    backoff_factor, growth_interval)
        skipped.append(found_inf)
        if not found_inf:
            w -= np.float32(lr) * grads  # unscaled in fp32: update the master weights
    return {"weights": w, "scales": scales, "skipped": skipped}


def reference_loss_scaler_step(grads16, scale, good_steps, growth_factor=2.0, backoff_factor=0.5,
                               growth_interval=2000):
    """One step of GradScaler: unscale in fp32 (× the fp32 reciprocal), found_inf, the next scale and count
    (:func:`mlsys_lab.training_memory.mixed_precision.loss_scaler_step`, which the capstone runs)."""
    return loss_scaler_step(grads16, scale, good_steps, growth_factor, backoff_factor, growth_interval)


def loss_scaling_stream(g: np.random.Generator, n_steps: int, d: int, spikes: int, nans: int):
    """True gradients: per coordinate a sign and a magnitude from 10⁻⁹ (flushes to zero in fp16 unscaled)
    to 10⁻², jittered per step; ``spikes`` steps with one coordinate 10²–10⁵× larger; ``nans`` NaN steps."""
    magnitude = 10.0 ** g.uniform(-9, -2, size=d)
    magnitude[: max(1, d // 4)] = 10.0 ** g.uniform(-9, -7.5, size=max(1, d // 4))  # surely below fp16's 6e-8
    sign = np.where(g.random(d) < 0.5, -1.0, 1.0)
    grads = sign * magnitude * g.uniform(0.5, 1.5, size=(n_steps, d))
    for step in g.choice(n_steps, size=spikes, replace=False):
        grads[step, g.integers(d)] *= 10.0 ** g.uniform(2, 5)
    nan_steps = frozenset(int(s) for s in g.choice(n_steps, size=nans, replace=False))
    return grads, nan_steps, magnitude


def _fp16_entries(g: np.random.Generator, shape, low: float, high: float) -> np.ndarray:
    """float16 values of random sign with magnitudes 2^uniform(low, high), a few of them ±0."""
    values = np.where(g.random(shape) < 0.5, -1.0, 1.0) * 2.0 ** g.uniform(low, high, size=shape)
    values[g.random(shape) < 0.05] = -0.0
    with np.errstate(over="ignore"):
        return values.astype(np.float16)


def loss_scaler_cases(g: np.random.Generator) -> list[tuple[str, tuple]]:
    """(label, args) of :func:`check_loss_scaler_step`'s cases: args = (grads16, scale, good_steps, growth_factor,
    backoff_factor, growth_interval); every scale and product of a scale and a factor is exact in float32."""
    cases = [("the example: [1, 3, −2⁻¹²] at scale 2¹⁶, counter 1 of 2",
              (np.array([1.0, 3.0, -2.0 ** -12], dtype=np.float16), 65536.0, 1, 2.0, 0.5, 2))]
    shape = (int(g.integers(2, 6)), int(g.integers(8, 40)))
    interval = int(g.integers(5, 2001))
    k = int(g.integers(10, 21))
    cases.append((f"a clean step, counter part-way ({interval // 2} of {interval}), scale 2^{k}",
                  (_fp16_entries(g, shape, -24, 12), 2.0 ** k, interval // 2, 2.0, 0.5, interval)))
    interval, k = int(g.integers(2, 60)), int(g.integers(8, 17))
    cases.append((f"counter at growth_interval − 1 = {interval - 1}: this clean step grows ×4 from 2^{k}",
                  (_fp16_entries(g, int(g.integers(16, 200)), -20, 10), 2.0 ** k, interval - 1, 4.0, 0.25, interval)))
    interval = int(g.integers(6, 100))
    good = int(g.integers(4, interval))
    grads = _fp16_entries(g, int(g.integers(16, 200)), -20, 10)
    grads[g.integers(grads.size)] = np.float16(np.inf) * (1 if g.random() < 0.5 else -1)
    cases.append((f"an inf entry with the counter at {good} of {interval}, backoff ×0.25",
                  (grads, 2.0 ** int(g.integers(12, 20)), good, 4.0, 0.25, interval)))
    interval = int(g.integers(3, 50))
    good = int(g.integers(1, interval))
    grads = _fp16_entries(g, (4, int(g.integers(4, 30))), -20, 10)
    grads.flat[g.integers(grads.size)] = np.nan
    cases.append((f"a NaN entry (no inf) with the counter at {good} of {interval}",
                  (grads, 2.0 ** int(g.integers(8, 16)), good, 2.0, 0.5, interval)))
    k = int(g.integers(2, 7))
    cases.append((f"scale 2^-{k} (after backoffs): entries up to 6·10⁴ that overflow if unscaled in fp16",
                  (_fp16_entries(g, int(g.integers(16, 100)), 12, 15.99), 2.0 ** -k, 0, 2.0, 0.5, 2000)))
    k = int(g.integers(22, 27))
    cases.append((f"scale 2^{k}: entries that flush to zero if unscaled in fp16",
                  (_fp16_entries(g, int(g.integers(64, 300)), -10, 4), 2.0 ** k, 3, 2.0, 0.5, 10)))
    k, interval = int(g.integers(8, 15)), int(g.integers(2, 20))
    cases.append((f"scale 3·2^{k} (its reciprocal rounds in float32), counter {interval - 1} of {interval}, growth "
                   f"×1.5", (_fp16_entries(g, 512, -14, 15), 3.0 * 2.0 ** k, interval - 1, 1.5, 0.75, interval)))
    k = int(g.integers(0, 24))
    cases.append((f"growth_interval 1: every clean step grows, from 2^{k}",
                  (_fp16_entries(g, int(g.integers(1, 50)), -24, 4), 2.0 ** k, 0, 2.0, 0.5, 1)))
    grads = _fp16_entries(g, int(g.integers(8, 64)), -24, -14)  # fp16 subnormals and signed zeros
    cases.append(("fp16 subnormals and signed zeros at scale 8, counter 0 of 1 (interval 1)",
                  (grads, 8.0, 0, 2.0, 0.5, 1)))
    return cases


def scaler_step_problem(got, expected) -> str | None:
    """What is wrong with the learner's (grads, found_inf, new_scale, new_good_steps), or None: grads must be the
    reference's float32 values bit for bit (NaN where it has NaN), the rest equal."""
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        return f"return (grads, found_inf, new_scale, new_good_steps), a tuple of 4; got {short(got)}"
    grads, found_inf, new_scale, new_good = got
    want_grads, want_inf, want_scale, want_good = expected
    if not isinstance(found_inf, (bool, np.bool_)) or bool(found_inf) != want_inf:
        return f"found_inf is {short(found_inf)}; expected {want_inf}"
    if not isinstance(grads, np.ndarray) or grads.dtype != np.float32:
        kind = f"dtype {grads.dtype}" if isinstance(grads, np.ndarray) else type(grads).__name__
        return f"grads must be a float32 array (unscale in float32); got {kind}"
    if grads.shape != want_grads.shape:
        return f"grads has shape {grads.shape}; expected {want_grads.shape} (grads16's)"
    nan = np.isnan(want_grads)
    wrong = (grads.view(np.uint32) != want_grads.view(np.uint32)) & ~nan | (nan & ~np.isnan(grads))
    if wrong.any():
        i = tuple(int(v) for v in np.argwhere(wrong)[0])
        a, b = grads[i], want_grads[i]
        ulp = (np.isfinite(a) and np.isfinite(b) and a != 0
               and abs(int(a.view(np.int32)) - int(b.view(np.int32))) == 1)
        why = (": one unit in the last place off; unscale as float32(grads16) * float32(1 / scale), the reciprocal "
               "rounded once, as GradScaler does" if ulp else "")
        return (f"grads[{', '.join(map(str, i))}] is {a} (bits {a.view(np.uint32):#010x}); expected {b} (bits "
                f"{b.view(np.uint32):#010x}){why}")
    try:
        scale_ok = float(new_scale) == want_scale
    except (TypeError, ValueError):
        scale_ok = False
    if not scale_ok:
        return f"new_scale is {short(new_scale)}; expected {want_scale!r}"
    if isinstance(new_good, (bool, np.bool_)) or not isinstance(new_good, (int, np.integer)) or new_good != want_good:
        return f"new_good_steps is {short(new_good)}; expected {want_good}"
    return None


# --- activation checkpointing under a budget -----------------------------------------------------------------

def reference_checkpoint_plan(activation_bytes, checkpoint_bytes, forward_costs, budget_bytes):
    """The segment starts with the least recompute whose peak fits ``budget_bytes``, or None (a DP, O(n²)).

    Everything outside the last segment [t, n) is recomputed once, so the least recompute is the smallest t for
    which the layers before t can be cut into segments that fit.
    g[p]: the fewest checkpoint bytes of a cut of layers [0, p) in which every segment [q, p') fits while the
    checkpoints before it are alive (g[q] + A[q, p') ≤ budget). The plan fits iff g[t] + A[t, n) ≤ budget.
    """
    a, x, f = (np.asarray(v, dtype=float) for v in (activation_bytes, checkpoint_bytes, forward_costs))
    n = a.size
    a_prefix, f_prefix = np.concatenate([[0.0], np.cumsum(a)]), np.concatenate([[0.0], np.cumsum(f)])
    best, previous = [np.inf] * (n + 1), [-1] * (n + 1)
    best[0] = 0.0
    for p in range(1, n):
        for q in range(p):
            if best[q] + a_prefix[p] - a_prefix[q] <= budget_bytes and best[q] + x[q] < best[p]:
                best[p], previous[p] = best[q] + x[q], q
    feasible = [t for t in range(n) if best[t] + a_prefix[n] - a_prefix[t] <= budget_bytes]
    if not feasible:
        return None
    t = min(feasible, key=lambda t: (f_prefix[t], t))
    starts = [t]
    while starts[-1] > 0:
        starts.append(previous[starts[-1]])
    return sorted(starts)


def least_feasible_budget(activation_bytes, checkpoint_bytes, forward_costs) -> int:
    """The smallest integer budget any plan fits (bisection on the DP's feasibility; bytes are integers)."""
    low, high = int(max(activation_bytes)) - 1, int(np.sum(activation_bytes))  # low never fits, high always does
    while high - low > 1:
        mid = (low + high) // 2
        if reference_checkpoint_plan(activation_bytes, checkpoint_bytes, forward_costs, mid) is None:
            low = mid
        else:
            high = mid
    return high


def plan_problem(got, a, x, f, budget, optimum) -> str | None:
    """What is wrong with the learner's plan ``got`` (run through the simulator), or None."""
    if optimum is None:
        return None if got is None else (f"no plan fits {budget} bytes (the least any plan needs is more): return "
                                          f"None; got {got!r:.60}")
    if got is None:
        return f"returned None, but a plan fits {budget} bytes: {optimum}"
    try:
        starts = [int(s) for s in np.asarray(got).reshape(-1)]
        run = simulate_checkpoint_plan(a, x, f, starts)
    except (TypeError, ValueError, IndexError) as exc:
        return f"{got!r:.60} is not a plan the simulator can run: {exc}"
    best = simulate_checkpoint_plan(a, x, f, optimum)
    if run.peak_bytes > budget:
        return f"plan {starts} peaks at {run.peak_bytes:.0f} bytes, over the budget of {budget}"
    if run.recompute_cost != best.recompute_cost:
        return (f"plan {starts} fits (peak {run.peak_bytes:.0f} ≤ {budget}) but recomputes {run.recompute_cost:.0f}; "
                f"the least is {best.recompute_cost:.0f} (e.g. {optimum}, peak {best.peak_bytes:.0f})")
    return None


# --- softmax cross-entropy as a fused operator -------------------------------------------------------------

def reference_softmax_cross_entropy(logits, labels, label_smoothing, grad_out):
    """(per-row losses, dL/dlogits for upstream ``grad_out``), by the engine's reverse pass through the primitives."""
    tape = Tape()
    z = Tensor(backend.xp.asarray(np.asarray(logits, dtype=np.float64)), tape, requires_grad=True)
    losses = composed_softmax_cross_entropy(z, backend.xp.asarray(np.asarray(labels)), float(label_smoothing))
    tape.backward(losses, backend.xp.asarray(np.asarray(grad_out, dtype=np.float64)))
    return backend.asnumpy(losses.data), backend.asnumpy(z.grad)


def sce_problem(got, logits, grad_out, expected) -> str | None:
    """Losses within 10⁻¹² of the row's logit scale, gradients within 10⁻¹² of max |grad_out|: round-off only."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"return (losses, grad_logits), a pair; got {type(got).__name__}"
    exp_loss, exp_grad = expected
    try:
        loss, grad = np.asarray(got[0], dtype=float), np.asarray(got[1], dtype=float)
    except (TypeError, ValueError):
        return "losses and grad_logits must be arrays of numbers"
    for name, value, want in (("losses", loss, exp_loss), ("grad_logits", grad, exp_grad)):
        if value.shape != want.shape:
            return f"{name} has shape {value.shape}; expected {want.shape}"
        if not np.isfinite(value).all():
            row = int(np.argwhere(~np.isfinite(value))[0][0])
            return f"{name} has inf or NaN (row {row}): exp overflowed, or log of a probability that underflowed to 0?"
    loss_tol = 1e-12 * np.maximum(1.0, np.abs(logits).max(axis=1))
    if (np.abs(loss - exp_loss) > loss_tol).any():
        i = int(np.argmax(np.abs(loss - exp_loss) - loss_tol))
        return f"loss of row {i} is {loss[i]:.17g}; expected {exp_loss[i]:.17g}"
    grad_tol = 1e-12 * max(float(np.abs(grad_out).max()), 1e-300)
    if (np.abs(grad - exp_grad) > grad_tol).any():
        i, j = (int(v) for v in np.unravel_index(np.argmax(np.abs(grad - exp_grad)), grad.shape))
        return (f"grad_logits[{i}, {j}] is {grad[i, j]:.17g}; expected {exp_grad[i, j]:.17g} (off by "
                f"{abs(grad[i, j] - exp_grad[i, j]):.2g}, more than round-off: {grad_tol:.1g})")
    return None
