"""Wrong answers each check of 06_training_memory must reject on every seed (tests/catalogue.py runs them)."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.training_memory import (
    check_checkpoint_plan,
    check_layer_norm_backward,
    check_loss_scaling,
    check_quantize_groupwise,
    check_softmax_cross_entropy,
    check_training_bytes,
    reference_layer_norm_backward,
    reference_training_bytes,
)
from mlsys_lab.exercises.training_memory_references import (
    reference_checkpoint_plan,
    reference_loss_scaling,
    reference_softmax_cross_entropy,
)
from mlsys_lab.training_memory.diff_modes import numerical_gradient
from mlsys_lab.training_memory.recompute import simulate_checkpoint_plan

# --- layer_norm_backward ------------------------------------------------------------------------------------


def _ln_parts(x, eps=1e-5, ddof=0):
    mu = x.mean(axis=1, keepdims=True)
    sigma = np.sqrt(x.var(axis=1, keepdims=True, ddof=ddof) + eps)
    return (x - mu) / sigma, sigma


def ln_numerical(x, grad_out):
    def loss(x_):
        y, _ = _ln_parts(x_)
        return float((y * grad_out).sum())
    return numerical_gradient(loss, x, step=1e-5)


def ln_numerical_best_step(x, grad_out):
    def loss(x_):
        y, _ = _ln_parts(x_)
        return float((y * grad_out).sum())
    return numerical_gradient(loss, x, step=1e-3)


def ln_no_eps(x, grad_out):
    y, sigma = _ln_parts(x, eps=0.0)
    sigma = np.where(sigma == 0, 1e-12, sigma)
    y = np.nan_to_num(y)
    return (grad_out - grad_out.mean(axis=1, keepdims=True) - y * (grad_out * y).mean(axis=1, keepdims=True)) / sigma


def ln_drops_y_term(x, grad_out):
    _, sigma = _ln_parts(x)
    return (grad_out - grad_out.mean(axis=1, keepdims=True)) / sigma


def ln_drops_mean_term(x, grad_out):
    y, sigma = _ln_parts(x)
    return (grad_out - y * (grad_out * y).mean(axis=1, keepdims=True)) / sigma


def ln_unbiased_variance(x, grad_out):
    if x.shape[1] < 2:
        return reference_layer_norm_backward(x, grad_out)
    y, sigma = _ln_parts(x, ddof=1)
    return (grad_out - grad_out.mean(axis=1, keepdims=True) - y * (grad_out * y).mean(axis=1, keepdims=True)) / sigma


def ln_naive_variance(x, grad_out):
    mu = x.mean(axis=1, keepdims=True)
    var = np.maximum((x * x).mean(axis=1, keepdims=True) - mu * mu, 0.0)  # E[x²] − μ²: cancels at large offsets
    sigma = np.sqrt(var + 1e-5)
    y = (x - mu) / sigma
    return (grad_out - grad_out.mean(axis=1, keepdims=True) - y * (grad_out * y).mean(axis=1, keepdims=True)) / sigma


def ln_upstream_over_sigma(x, grad_out):
    _, sigma = _ln_parts(x)
    return grad_out / sigma


def ln_over_columns(x, grad_out):
    return reference_layer_norm_backward(x.T, grad_out.T).T


# --- training_bytes -----------------------------------------------------------------------------------------


def _tb(n_layers, hidden, n_heads, vocab, batch, seq, *, small_terms=True, embed=1, per_param=16, act=34,
        attention=True, layers_in_act=True, int_ratio=False, value_scale=1):
    n_params = 12 * n_layers * hidden ** 2 + (13 * n_layers * hidden if small_terms else 0) + embed * vocab * hidden
    ratio = (n_heads * seq // hidden) if int_ratio else n_heads * seq / hidden
    per_layer = seq * batch * hidden * (act * value_scale + (5 * ratio if attention else 0))
    return per_param * n_params + (n_layers if layers_in_act else 1) * per_layer


# --- quantize_groupwise -------------------------------------------------------------------------------------


def _symmetric(groups, q_max, axis=-1):
    scale = np.abs(groups).max(axis=axis, keepdims=True) / q_max
    scale = np.where(scale == 0, 1.0, scale)
    return np.clip(np.round(groups / scale), -q_max, q_max) * scale


def reference_quantize_groupwise(w, bits, group_size):
    groups = w.reshape(w.shape[0], -1, group_size)
    return _symmetric(groups, 2 ** (bits - 1) - 1).reshape(w.shape)


def qg_per_tensor(w, bits, group_size):
    return _symmetric(w.reshape(1, -1), 2 ** (bits - 1) - 1).reshape(w.shape)


def qg_per_row(w, bits, group_size):
    return _symmetric(w, 2 ** (bits - 1) - 1)


def qg_kmeans(w, bits, group_size):
    """A per-group codebook of 2^b − 1 values (quantiles, then Lloyd steps): lower error, but no uniform grid."""
    groups = w.astype(np.float64).reshape(-1, group_size)
    n_codes = min(2 ** bits - 1, group_size)
    centres = np.quantile(groups, np.linspace(0, 1, n_codes), axis=1).T  # (n_groups, n_codes)
    for _ in range(3):
        assign = np.abs(groups[:, :, None] - centres[:, None, :]).argmin(axis=2)
        onehot = assign[:, :, None] == np.arange(n_codes)[None, None, :]
        counts = onehot.sum(axis=1)
        sums = (onehot * groups[:, :, None]).sum(axis=1)
        centres = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
    assign = np.abs(groups[:, :, None] - centres[:, None, :]).argmin(axis=2)
    return np.take_along_axis(centres, assign, axis=1).reshape(w.shape)


def qg_truncates(w, bits, group_size):
    q_max = 2 ** (bits - 1) - 1
    groups = w.reshape(w.shape[0], -1, group_size)
    scale = np.abs(groups).max(axis=2, keepdims=True) / q_max
    scale = np.where(scale == 0, 1.0, scale)
    return (np.trunc(groups / scale) * scale).reshape(w.shape)


def qg_q_max_power_of_two(w, bits, group_size):
    groups = w.reshape(w.shape[0], -1, group_size)
    return _symmetric(groups, 2 ** (bits - 1)).reshape(w.shape)


def qg_zero_group_nan(w, bits, group_size):
    q_max = 2 ** (bits - 1) - 1
    groups = w.reshape(w.shape[0], -1, group_size)
    scale = np.abs(groups).max(axis=2, keepdims=True) / q_max
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.clip(np.round(groups / scale), -q_max, q_max) * scale).reshape(w.shape)


def qg_groups_down_columns(w, bits, group_size):
    if w.shape[0] % group_size:
        return qg_per_tensor(w, bits, group_size)
    return reference_quantize_groupwise(w.T.copy(), bits, group_size).T


def qg_ignores_bits(w, bits, group_size):
    return reference_quantize_groupwise(w, 8, group_size)


def qg_asymmetric(w, bits, group_size):
    q_max = 2 ** bits - 1
    groups = w.reshape(w.shape[0], -1, group_size)
    low, high = groups.min(axis=2, keepdims=True), groups.max(axis=2, keepdims=True)
    scale = np.where(high > low, (high - low) / q_max, 1.0)
    zero = np.round(-low / scale)
    return ((np.clip(np.round(groups / scale) + zero, 0, q_max) - zero) * scale).reshape(w.shape)


# --- loss_scaling -------------------------------------------------------------------------------------------


def _scaler(backward, weights, lr, n_steps, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
            growth_interval=2000, *, call_scale=None, unscale=True, finite=np.isfinite, skip=True, backoff=True,
            reset=True, grow_after=0, global_count=False, fixed_factors=False, unscale_fp16=False):
    if fixed_factors:
        growth_factor, backoff_factor = 2.0, 0.5
    w = np.array(weights, dtype=np.float32)
    scale, clean, scales, skipped = float(init_scale), 0, [], []
    for step in range(n_steps):
        g16 = np.asarray(backward(step, scale if call_scale is None else call_scale))
        scales.append(scale)
        used = scale if call_scale is None else call_scale
        if not finite(g16).all():
            skipped.append(skip)
            if backoff:
                scale *= backoff_factor
            if reset:
                clean = 0
            if skip:
                continue
            g16 = np.nan_to_num(g16, nan=0.0, posinf=0.0, neginf=0.0)
        else:
            skipped.append(False)
        if unscale_fp16:
            g = (g16 / np.float16(used)).astype(np.float32)
        else:
            g = g16.astype(np.float32) / np.float32(used) if unscale else g16.astype(np.float32)
        w -= np.float32(lr) * g
        clean += 1
        if (global_count and (step + 1) % growth_interval == 0) or (not global_count and clean == growth_interval
                                                                    + grow_after):
            scale *= growth_factor
            clean = 0
    return {"weights": w, "scales": scales, "skipped": skipped}


def _scaler_reports_unscaled(backward, weights, lr, n_steps, *settings):
    """Reports GradScaler's scales but calls backward without scaling the loss."""
    out = _scaler(backward, weights, lr, n_steps, *settings, call_scale=1.0)
    return out


# --- checkpoint_plan ----------------------------------------------------------------------------------------


def _all_plans(n):
    for mask in range(2 ** (n - 1)):
        yield [0] + [i for i in range(1, n) if mask >> (i - 1) & 1]


def _best_by(a, x, f, budget, peak_of, key):
    fits = [p for p in _all_plans(len(a)) if peak_of(a, x, f, p) <= budget]
    return min(fits, key=lambda p: key(a, x, f, p)) if fits else None


def _sim_peak(a, x, f, plan):
    return simulate_checkpoint_plan(a, x, f, plan).peak_bytes


def _recompute(a, x, f, plan):
    return simulate_checkpoint_plan(a, x, f, plan).recompute_cost


def _chen_bound(a, x, f, plan):
    """All checkpoints alive plus the largest segment (Chen et al.'s bound, not the freeing schedule)."""
    bounds = plan[1:] + [len(a)]
    return sum(x[s] for s in plan[:-1]) + max(sum(a[s:e]) for s, e in zip(plan, bounds, strict=True))


def _no_checkpoint_bytes(a, x, f, plan):
    bounds = plan[1:] + [len(a)]
    return max(sum(a[s:e]) for s, e in zip(plan, bounds, strict=True))


def cp_uniform(a, x, f, budget):
    """The best uniform segment length (section 5's k), ignoring that layers differ."""
    n = len(a)
    fits = [list(range(0, n, k)) for k in range(n, 0, -1) if _sim_peak(a, x, f, list(range(0, n, k))) <= budget]
    return min(fits, key=lambda p: _recompute(a, x, f, p)) if fits else None


def cp_strict(a, x, f, budget):
    return reference_checkpoint_plan(a, x, f, budget - 1e-9)


def cp_min_peak(a, x, f, budget):
    """The plan with the lowest peak (the √n idea), whatever it recomputes."""
    best = min(_all_plans(len(a)), key=lambda p: (_sim_peak(a, x, f, p), _recompute(a, x, f, p)))
    return best if _sim_peak(a, x, f, best) <= budget else None


def cp_every_layer(a, x, f, budget):
    plan = [0] if sum(a) <= budget else list(range(len(a)))
    return plan if _sim_peak(a, x, f, plan) <= budget else None


def cp_greedy_front(a, x, f, budget):
    """Extend each segment from the front while it fits with the checkpoints so far; the rest is the last segment."""
    n, starts, kept = len(a), [0], 0.0
    while True:
        s = starts[-1]
        if kept + sum(a[s:]) <= budget:
            return starts
        e = s + 1
        while e < n and kept + sum(a[s:e + 1]) <= budget:
            e += 1
        if kept + sum(a[s:e]) > budget or e >= n:
            return None
        kept += x[s]
        starts.append(e)


def cp_empty_for_infeasible(a, x, f, budget):
    plan = reference_checkpoint_plan(a, x, f, budget)
    return [] if plan is None else plan


# --- softmax_cross_entropy ---------------------------------------------------------------------------------


def _sce(logits, labels, smoothing, grad_out, *, shift=True, smoothing_to_others=False, mean=False,
         ignore_grad_out=False, ignore_smoothing=False, log_of_softmax=False):
    z = logits - logits.max(axis=1, keepdims=True) if shift else logits
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        log_p = np.log(p) if log_of_softmax else z - np.log(e.sum(axis=1, keepdims=True))
    b, c = logits.shape
    eps = 0.0 if ignore_smoothing else smoothing
    q = np.zeros_like(p)
    if smoothing_to_others and c > 1:
        q += eps / (c - 1)
        q[np.arange(b), labels] = 1.0 - eps
    else:
        q += eps / c
        q[np.arange(b), labels] += 1.0 - eps
    with np.errstate(invalid="ignore"):  # inf·0 where the naive variants overflowed
        losses = -(q * log_p).sum(axis=1)
    g = np.ones(b) if ignore_grad_out else grad_out
    grad = (p - q) * g[:, None]
    if mean:
        return losses / b, grad / b
    return losses, grad


def sce_numerical(logits, labels, smoothing, grad_out):
    """The right loss, and the gradient by central differences of Σ g·loss (step 10⁻⁶)."""
    losses, _ = _sce(logits, labels, smoothing, grad_out)
    grad = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        step = 1e-6 * max(1.0, abs(logits[idx]))
        up, down = logits.copy(), logits.copy()
        up[idx] += step
        down[idx] -= step
        grad[idx] = (grad_out @ _sce(up, labels, smoothing, grad_out)[0]
                     - grad_out @ _sce(down, labels, smoothing, grad_out)[0]) / (2 * step)
    return losses, grad


CATALOGUES = [
    Catalogue("layer_norm_backward", check_layer_norm_backward, reference_layer_norm_backward, {
        "central differences (step 1e-5) instead of the chain rule": ln_numerical,
        "central differences at the best step for the offset rows": ln_numerical_best_step,
        "σ without eps": ln_no_eps,
        "drops the −y·mean(g·y) term": ln_drops_y_term,
        "drops the −mean(g) term": ln_drops_mean_term,
        "unbiased variance (ddof=1)": ln_unbiased_variance,
        "variance as E[x²] − μ² (cancels at large offsets)": ln_naive_variance,
        "returns g/σ only": ln_upstream_over_sigma,
        "normalises over columns": ln_over_columns,
    }),
    Catalogue("training_bytes", check_training_bytes, reference_training_bytes, {
        "drops the 13·L·h of biases and LayerNorms": lambda *a: _tb(*a, small_terms=False),
        "counts two embeddings (untied)": lambda *a: _tb(*a, embed=2),
        "12 B/param (no fp32 master copy)": lambda *a: _tb(*a, per_param=12),
        "selective recompute (no 5·a·s/h)": lambda *a: _tb(*a, attention=False),
        "one layer's activations": lambda *a: _tb(*a, layers_in_act=False),
        "integer division in a·s/h": lambda *a: _tb(*a, int_ratio=True),
        "fp32 activations (values doubled)": lambda *a: _tb(*a, act=66),
    }),
    Catalogue("quantize_groupwise", check_quantize_groupwise, reference_quantize_groupwise, {
        "a per-group k-means codebook": qg_kmeans,
        "one scale for the whole tensor": qg_per_tensor,
        "one scale per row": qg_per_row,
        "truncates instead of rounding": qg_truncates,
        "q_max = 2^(b−1) (not symmetric)": qg_q_max_power_of_two,
        "a group of zeros gives NaN": qg_zero_group_nan,
        "groups run down the columns": qg_groups_down_columns,
        "ignores bits (always 8)": qg_ignores_bits,
        "asymmetric (min/max) quantization": qg_asymmetric,
    }),
    Catalogue("loss_scaling", check_loss_scaling, reference_loss_scaling, {
        "never scales the loss (backward at scale 1), reports the scales": _scaler_reports_unscaled,
        "forgets to unscale": lambda *a: _scaler(*a, unscale=False),
        "unscales in fp16 (small gradients flush again)": lambda *a: _scaler(*a, unscale_fp16=True),
        "checks for inf only, not NaN": lambda *a: _scaler(*a, finite=lambda g: ~np.isinf(g)),
        "applies the step with inf/NaN zeroed instead of skipping": lambda *a: _scaler(*a, skip=False),
        "skips but never backs off": lambda *a: _scaler(*a, backoff=False),
        "does not restart the growth counter on overflow": lambda *a: _scaler(*a, reset=False),
        "grows after growth_interval + 1 clean steps": lambda *a: _scaler(*a, grow_after=1),
        "grows every growth_interval steps of the run": lambda *a: _scaler(*a, global_count=True),
        "always ×2 and ×0.5 (ignores the factors)": lambda *a: _scaler(*a, fixed_factors=True),
    }),
    Catalogue("checkpoint_plan", check_checkpoint_plan, reference_checkpoint_plan, {
        "uniform segments (section 5's best k)": cp_uniform,
        "budget as a strict bound (peak < budget)": cp_strict,
        "the lowest-peak plan, whatever it recomputes": cp_min_peak,
        "Chen's bound (all checkpoints + the largest segment) as the peak":
            lambda a, x, f, b: _best_by(a, x, f, b, _chen_bound, _recompute),
        "ignores the checkpoints' bytes": lambda a, x, f, b: _best_by(a, x, f, b, _no_checkpoint_bytes, _recompute),
        "all or nothing: every layer a segment when the chain does not fit": cp_every_layer,
        "greedy from the front": cp_greedy_front,
        "[] instead of None when nothing fits": cp_empty_for_infeasible,
    }),
    Catalogue("softmax_cross_entropy", check_softmax_cross_entropy, reference_softmax_cross_entropy, {
        "central differences for the gradient": sce_numerical,
        "no max shift (exp overflows)": lambda *a: _sce(*a, shift=False),
        "log of the softmax (−inf where p underflows)": lambda *a: _sce(*a, log_of_softmax=True),
        "means over the batch (the engine's op, not per row)": lambda *a: _sce(*a, mean=True),
        "ignores grad_out": lambda *a: _sce(*a, ignore_grad_out=True),
        "ignores label smoothing": lambda *a: _sce(*a, ignore_smoothing=True),
        "smoothing ε/(C−1) over the other classes": lambda *a: _sce(*a, smoothing_to_others=True),
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
