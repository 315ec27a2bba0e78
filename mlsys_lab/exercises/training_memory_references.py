"""References and hidden cases of lesson 06's build exercises (loss scaler, checkpoint plan, fused cross-entropy).

The checks themselves are in :mod:`mlsys_lab.exercises.training_memory`; this module holds what they compare
against, on the grading side only (a graded worker may not import ``mlsys_lab.exercises``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from mlsys_lab import backend
from mlsys_lab.training_memory.autodiff import Tape, Tensor, composed_softmax_cross_entropy
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
    """GradScaler's loop (Micikevicius et al. 2018; PyTorch ``torch.amp.GradScaler``) over fp32 master weights."""
    w = np.array(weights, dtype=np.float32)
    scale, clean, scales, skipped = float(init_scale), 0, [], []
    for step in range(n_steps):
        grads16 = np.asarray(backward(step, scale))  # gradients of scale · loss, in fp16
        scales.append(scale)
        if not np.isfinite(grads16).all():  # inf or NaN: skip the update, back off
            skipped.append(True)
            scale *= backoff_factor
            clean = 0
            continue
        skipped.append(False)
        w -= np.float32(lr) * (grads16.astype(np.float32) / np.float32(scale))  # unscale in fp32, update master
        clean += 1
        if clean == growth_interval:
            scale *= growth_factor
            clean = 0
    return {"weights": w, "scales": scales, "skipped": skipped}


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
