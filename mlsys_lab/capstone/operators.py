"""The course's versions of the operators the learner writes for the capstone's model: lesson 06's fused softmax
cross-entropy and layer-norm backward, and this lesson's backward of causal attention (with the probabilities its
forward pass saves). :class:`mlsys_lab.capstone.model.ModelOps` carries whichever versions run.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.nn import softmax
from mlsys_lab.validation import check_array, check_index_array, check_number, check_positive

LN_EPS = 1e-5  # lesson 06's layer norm: σ = √(var + 1e-5), var with 1/C


def cross_entropy_with_grad(logits, labels, label_smoothing, grad_out):
    """Per-row loss −Σ_j q_j log softmax(z)_j, q = (1−ε)·onehot + ε/C, and the VJP (softmax(z) − q)·g per row."""
    rows = check_array("logits", logits, ndim=2, kinds="f").shape[0]
    check_index_array("labels", check_array("labels", labels, kinds="iu", shape=(rows,)), logits.shape[1],
                      of_name="classes")
    check_number("label_smoothing", label_smoothing, low=0.0, high=1.0, high_inclusive=False)
    check_array("grad_out", grad_out, kinds="f", shape=(rows,))
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows, classes = logits.shape
    q = np.full((rows, classes), label_smoothing / classes)
    q[np.arange(rows), labels] += 1.0 - label_smoothing
    return -(q * log_probs).sum(axis=1), (np.exp(log_probs) - q) * grad_out[:, None]


def layer_norm_grad(x, grad_out):
    """dL/dx of y = (x − μ)/σ per row, σ = √(var + 1e-5): (g − mean(g) − y·mean(g·y)) / σ."""
    if check_array("grad_out", grad_out, kinds="f").shape != check_array("x", x, ndim=2, kinds="f").shape:
        raise ValueError(f"grad_out must have the shape of x {np.shape(x)}; got {np.shape(grad_out)}")
    sigma = np.sqrt(x.var(axis=1, keepdims=True) + LN_EPS)
    y = (x - x.mean(axis=1, keepdims=True)) / sigma
    return (grad_out - grad_out.mean(axis=1, keepdims=True) - y * (grad_out * y).mean(axis=1, keepdims=True)) / sigma


def causal_probs(q, k, scale):
    """P = softmax(scale · q·kᵀ) with position i seeing positions j ≤ i: what the forward pass saved. q and k are
    (B, H, T, D) floats; P is (B, H, T, T)."""
    shape = check_array("q", q, ndim=4, kinds="f").shape
    check_array("k", k, kinds="f", shape=shape)
    scale = check_positive("scale", scale)
    t = shape[2]
    return softmax(np.where(np.tri(t, dtype=bool), scale * (q @ k.swapaxes(-1, -2)), -np.inf))


def attention_vjp(q, k, v, probs, dy, scale):
    """(dq, dk, dv) of y = P·v, P = softmax(scale · q·kᵀ, causal), from dy, all (B, H, T, D); ``probs`` is P.

        dv = Pᵀ·dy,  dP = dy·vᵀ,  dS = P ⊙ (dP − rowsum(dP ⊙ P)),  dq = scale · dS·k,  dk = scale · dSᵀ·q

    (the masked entries of P are 0, so dS is 0 there: the mask needs no code of its own).
    """
    shape = check_array("q", q, ndim=4, kinds="f").shape
    for name, value in (("k", k), ("v", v), ("dy", dy)):
        check_array(name, value, kinds="f", shape=shape)
    check_array("probs", probs, kinds="f", shape=(*shape[:3], shape[2]))
    scale = check_positive("scale", scale)
    dprobs = dy @ v.swapaxes(-1, -2)                                       # (B, H, T, T)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    return scale * (dscores @ k), scale * (dscores.swapaxes(-1, -2) @ q), probs.swapaxes(-1, -2) @ dy
