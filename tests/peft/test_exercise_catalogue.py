"""Wrong answers each check of 10_peft must reject on every seed (tests/catalogue.py runs them)."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.peft import (
    check_lora_backward,
    check_lora_forward,
    check_lora_merge,
    check_lora_param_count,
    check_nf4_quantize,
    check_qlora_step,
    reference_lora_backward,
    reference_lora_forward,
    reference_lora_merge,
    reference_nf4_quantize,
    reference_qlora_step,
)
from mlsys_lab.nn import cross_entropy
from mlsys_lab.peft.nf4 import nf4_quantize
from mlsys_lab.training_memory.quantize import nf4_levels, quantize_blockwise


def reference_lora_param_count(shapes, rank, n_layers):
    return n_layers * sum(rank * (d_in + d_out) for d_in, d_out in shapes)


# --- lora_backward -------------------------------------------------------------------------------------------
def backward_merged(x, w, a, b, s, dy):
    _, da, db = reference_lora_backward(x, w, a, b, s, dy)
    return dy @ (w + s * (a @ b)).T, da, db


def backward_forms_ab(x, w, a, b, s, dy):
    _, da, db = reference_lora_backward(x, w, a, b, s, dy)
    return dy @ w.T + s * (dy @ (a @ b).T), da, db


def backward_dense_gradient(x, w, a, b, s, dy):
    dw = s * (x.T @ dy)  # the (d_in, d_out) gradient of the merged weight, then projected on A and B
    return dy @ w.T + s * ((dy @ b.T) @ a.T), dw @ b.T, a.T @ dw


def backward_left_to_right(x, w, a, b, s, dy):
    dx, _, db = reference_lora_backward(x, w, a, b, s, dy)
    return dx, s * x.T @ dy @ b.T, db  # evaluates (xᵀ dY) Bᵀ: forms dW


def backward_no_scale_in_adapters(x, w, a, b, s, dy):
    dx, da, db = reference_lora_backward(x, w, a, b, s, dy)
    return dx, da / s, db / s


def backward_no_scale_in_dx(x, w, a, b, s, dy):
    _, da, db = reference_lora_backward(x, w, a, b, s, dy)
    return dy @ w.T + (dy @ b.T) @ a.T, da, db


def backward_frozen_dx(x, w, a, b, s, dy):
    _, da, db = reference_lora_backward(x, w, a, b, s, dy)
    return dy @ w.T, da, db


def backward_with_dw(x, w, a, b, s, dy):
    return (*reference_lora_backward(x, w, a, b, s, dy), x.T @ dy)


def backward_scale_over_rank(x, w, a, b, s, dy):
    return reference_lora_backward(x, w, a, b, s / a.shape[1], dy)


# --- nf4_quantize --------------------------------------------------------------------------------------------
def nf4_per_tensor(w, levels, block):
    codes, _ = nf4_quantize(np.asarray(w) / np.abs(w).max(), levels, len(w))
    return codes, np.full(-(-len(w) // block), np.abs(w).max())


def nf4_ties_up(w, levels, block):
    _, absmax = nf4_quantize(w, levels, block)
    scale = np.repeat(absmax, block)[:len(w)]
    scaled = w / np.where(scale == 0, 1, scale)
    return np.searchsorted((levels[1:] + levels[:-1]) / 2, scaled, side="right"), absmax


def nf4_lesson06_padded(w, levels, block):
    padded = np.concatenate([w, np.zeros(-len(w) % block)])
    codes, absmax = quantize_blockwise(padded, levels, block)
    return codes[:len(w)], absmax  # float32 inside: the absmax and the ties are rounded


def nf4_drops_partial_block(w, levels, block):
    full = len(w) // block * block
    return nf4_quantize(w[:full], levels, block) if full else nf4_quantize(w, levels, block)


def nf4_zero_block_nan(w, levels, block):
    _, absmax = nf4_quantize(w, levels, block)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = w / np.repeat(absmax, block)[:len(w)]
    return np.searchsorted((levels[1:] + levels[:-1]) / 2, scaled), absmax


def nf4_signed_max(w, levels, block):
    starts = np.arange(0, len(w), block)
    absmax = np.maximum.reduceat(w, starts)
    return nf4_quantize(w, levels, block)[0], absmax


def nf4_fixed_levels(w, levels, block):
    return nf4_quantize(w, nf4_levels(), block)


def nf4_fixed_block(w, levels, block):
    return nf4_quantize(w, levels, 64)


def nf4_uniform_rounding(w, levels, block):
    codes, absmax = nf4_quantize(w, levels, block)
    scale = np.repeat(absmax, block)[:len(w)]
    scaled = w / np.where(scale == 0, 1, scale)
    return np.clip(np.round((scaled + 1) / 2 * (len(levels) - 1)), 0, len(levels) - 1).astype(int), absmax


# --- qlora_step ----------------------------------------------------------------------------------------------
def _dequantize(codes, absmax, levels, block, shape, with_absmax=True):
    values = levels[codes]
    return (values * np.repeat(absmax, block)[:codes.size] if with_absmax else values).reshape(shape)


def qlora_variant(state, x, labels, lr, *, absmax=True, relu_mask=True, sign=1.0, grad_scale=True,
                  layers=("1", "2"), loss_after=False, block=None, train_base=False):
    s, levels, bs = state["scale"], state["levels"], block or state["block_size"]
    ws = {i: _dequantize(state["codes" + i], state["absmax" + i], levels, bs,
                         (state["a" + i].shape[0], state["b" + i].shape[1]), absmax) for i in "12"}
    g = s if grad_scale else 1.0

    def forward(st):
        z = x @ ws["1"] + s * ((x @ st["a1"]) @ st["b1"])
        u = np.maximum(z, 0)
        return z, u, u @ ws["2"] + s * ((u @ st["a2"]) @ st["b2"])

    z, u, logits = forward(state)
    loss, dl = cross_entropy(logits, labels)
    grads = {"a2": g * (u.T @ (dl @ state["b2"].T)), "b2": g * ((u @ state["a2"]).T @ dl)}
    du = dl @ ws["2"].T + s * ((dl @ state["b2"].T) @ state["a2"].T)
    dz = du * (z > 0) if relu_mask else du
    grads.update({"a1": g * (x.T @ (dz @ state["b1"].T)), "b1": g * ((x @ state["a1"]).T @ dz)})
    new = dict(state)
    for name, grad in grads.items():
        if name[1] in layers:
            new[name] = state[name] - sign * lr * grad
    if train_base:
        for i, dw in (("1", x.T @ dz), ("2", u.T @ dl)):
            new["codes" + i], new["absmax" + i] = nf4_quantize(ws[i] - lr * dw, levels, bs)
    if loss_after:
        loss = cross_entropy(forward(new)[2], labels)[0]
    return new, loss


def variant(**kw):
    return lambda state, x, labels, lr: qlora_variant(state, x, labels, lr, **kw)


CATALOGUES = [
    Catalogue("lora_forward", check_lora_forward, reference_lora_forward, {
        "forms the merged matrix W₀ + s·A·B": lambda x, w, a, b, s: x @ (w + s * (a @ b)),
        "forms the d_in × d_out product A B beside W₀": lambda x, w, a, b, s: x @ w + s * (x @ (a @ b)),
        "ignores the scale": lambda x, w, a, b, s: x @ w + (x @ a) @ b,
        "scale divided by the rank again": lambda x, w, a, b, s: x @ w + s / a.shape[1] * ((x @ a) @ b),
        "forgets the frozen path x W₀": lambda x, w, a, b, s: s * ((x @ a) @ b),
        "the frozen path only": lambda x, w, a, b, s: x @ w,
        "subtracts the update": lambda x, w, a, b, s: x @ w - s * ((x @ a) @ b),
        "uses the first rank-1 component only": lambda x, w, a, b, s: x @ w + s * np.outer(x @ a[:, 0], b[0]),
    }),
    Catalogue("lora_backward", check_lora_backward, reference_lora_backward, {
        "forms the merged matrix W + s·A·B for dX": backward_merged,
        "forms the d_in × d_out product A B for dX": backward_forms_ab,
        "forms the dense gradient s·xᵀ dY, then projects it on A and B": backward_dense_gradient,
        "writes s * x.T @ dy @ b.T (left to right: forms xᵀ dY)": backward_left_to_right,
        "forgets the scale in dA and dB": backward_no_scale_in_adapters,
        "forgets the scale in dX's low-rank path": backward_no_scale_in_dx,
        "dX through the frozen path only (dY Wᵀ)": backward_frozen_dx,
        "returns the frozen weight's dW as well": backward_with_dw,
        "scale divided by the rank again": backward_scale_over_rank,
    }),
    Catalogue("lora_merge", check_lora_merge, reference_lora_merge, {
        "ignores the scale": lambda w, a, b, s: w + a @ b,
        "returns the update only": lambda w, a, b, s: s * (a @ b),
        "subtracts the update (unmerge)": lambda w, a, b, s: w - s * (a @ b),
        "scale divided by the rank again": lambda w, a, b, s: w + s / a.shape[1] * (a @ b),
        "uses the first rank-1 component only": lambda w, a, b, s: w + s * np.outer(a[:, 0], b[0]),
        "returns W₀ unchanged": lambda w, a, b, s: w.copy(),
    }),
    Catalogue("lora_param_count", check_lora_param_count, reference_lora_param_count, {
        "assumes square weights (2·r·d_in)": lambda shapes, r, n: n * sum(2 * r * d_in for d_in, _ in shapes),
        "forgets the layers": lambda shapes, r, n: sum(r * (d_in + d_out) for d_in, d_out in shapes),
        "counts the full d_in·d_out": lambda shapes, r, n: n * sum(d_in * d_out for d_in, d_out in shapes),
        "adds a bias per output": lambda shapes, r, n: n * sum(r * (d_in + d_out) + d_out for d_in, d_out in shapes),
        "the example's formula (2·r·d·2·L)": lambda shapes, r, n: 2 * r * shapes[0][0] * len(shapes) * n,
        "counts one shape only": lambda shapes, r, n: n * r * (shapes[0][0] + shapes[0][1]),
        "rank plus one": lambda shapes, r, n: n * sum((r + 1) * (d_in + d_out) for d_in, d_out in shapes),
    }),
    Catalogue("nf4_quantize", check_nf4_quantize, reference_nf4_quantize, {
        "one absmax for the whole tensor": nf4_per_tensor,
        "a tie takes the upper level": nf4_ties_up,
        "lesson 06's quantize_blockwise on a zero-padded tail (float32 inside)": nf4_lesson06_padded,
        "drops the last, partial block": nf4_drops_partial_block,
        "divides a block of zeros by its absmax 0": nf4_zero_block_nan,
        "absmax = max w, not max |w|": nf4_signed_max,
        "always NF4's levels (ignores levels)": nf4_fixed_levels,
        "always blocks of 64 (ignores block_size)": nf4_fixed_block,
        "rounds w / absmax on a uniform grid": nf4_uniform_rounding,
    }),
    Catalogue("qlora_step", check_qlora_step, reference_qlora_step, {
        "dequantizes without the absmax (levels[code] as the weight)": variant(absmax=False),
        "no ReLU mask in the backward": variant(relu_mask=False),
        "steps uphill (A + lr·dA)": variant(sign=-1.0),
        "forgets the scale in the adapters' gradients": variant(grad_scale=False),
        "trains the base too and re-quantizes it": variant(train_base=True),
        "updates only the second layer's adapters": variant(layers=("2",)),
        "reports the loss after the step": variant(loss_after=True),
        "always blocks of 64 (ignores block_size)": variant(block=64),
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
