"""Wrong answers each check of 06_training_memory must reject on every seed (tests/catalogue.py runs them)."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.training_memory import (
    check_layer_norm_backward,
    check_quantize_groupwise,
    check_training_bytes,
    reference_layer_norm_backward,
    reference_training_bytes,
)
from mlsys_lab.training_memory.diff_modes import numerical_gradient

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
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
