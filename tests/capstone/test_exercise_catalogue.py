"""The checks of 12_capstone reject plausible wrong attention backwards and gradient averages on every seed."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.capstone import (
    check_attention_backward,
    check_average_gradients,
    reference_attention_backward,
    reference_average_gradients,
)


def _pack(grads, names):
    return np.concatenate([np.asarray(grads[name]).reshape(-1) for name in names])


def _unpack(flat, like, names):
    out, start = {}, 0
    for name in names:
        size = np.asarray(like[name]).size
        out[name] = flat[start:start + size].reshape(np.shape(like[name]))
        start += size
    return out


def weighted(rank_grads, rank_tokens, group, *, divide_by=None, weight=True, names_out=None, dtype=None):
    """Pack n_r·g_r (or g_r), all-reduce once, unpack (in ``names_out`` order), divide by ``divide_by(tokens, r)``."""
    names = list(rank_grads[0])
    buffers = [_pack(g, names) * (n if weight else 1) for g, n in zip(rank_grads, rank_tokens, strict=True)]
    if dtype is not None:
        buffers = [b.astype(dtype) for b in buffers]
    summed = group.all_reduce(buffers)
    out = []
    for r, flat in enumerate(summed):
        flat = (flat / divide_by(rank_tokens, r)).astype(np.asarray(rank_grads[r][names[0]]).dtype)
        out.append(_unpack(flat, rank_grads[r], names_out(names) if names_out else names))
    return out


def per_tensor(rank_grads, rank_tokens, group):
    total, out = sum(rank_tokens), [{} for _ in rank_grads]
    for name in rank_grads[0]:
        summed = group.all_reduce([g[name] * n for g, n in zip(rank_grads, rank_tokens, strict=True)])
        for r, value in enumerate(summed):
            out[r][name] = value / total
    return out


def reads_the_other_ranks(rank_grads, rank_tokens, group):
    total = sum(rank_tokens)
    group.all_reduce([_pack(g, list(g)) * 0 for g in rank_grads])  # a call for the record
    mean = {k: sum(n * g[k] for g, n in zip(rank_grads, rank_tokens, strict=True)) / total for k in rank_grads[0]}
    return [dict(mean) for _ in rank_grads]


def keeps_its_own(rank_grads, rank_tokens, group):
    group.all_reduce([_pack(g, list(g)) for g in rank_grads])
    return [dict(g) for g in rank_grads]


WRONG = {
    "divides by the number of ranks (ignores the token counts)": lambda gs, ns, group: weighted(
        gs, ns, group, weight=False, divide_by=lambda tokens, r: len(tokens)),
    "sums the gradients, never divides": lambda gs, ns, group: weighted(gs, ns, group, divide_by=lambda t, r: 1),
    "weights by tokens, divides by the number of ranks": lambda gs, ns, group: weighted(
        gs, ns, group, divide_by=lambda tokens, r: len(tokens)),
    "divides by its own rank's tokens": lambda gs, ns, group: weighted(gs, ns, group,
                                                                        divide_by=lambda tokens, r: tokens[r]),
    "unweighted sum over the global token count": lambda gs, ns, group: weighted(
        gs, ns, group, weight=False, divide_by=lambda tokens, r: sum(tokens)),
    "packs in dict order, unpacks in sorted order": lambda gs, ns, group: weighted(
        gs, ns, group, divide_by=lambda tokens, r: sum(tokens), names_out=sorted),
    "all-reduces in float64 (twice the bytes of float32 gradients)": lambda gs, ns, group: weighted(
        gs, ns, group, divide_by=lambda tokens, r: sum(tokens), dtype=np.float64),
    "one all-reduce per tensor (no bucket)": per_tensor,
    "averages from the other ranks' gradients directly": reads_the_other_ranks,
    "each rank keeps its own gradient": keeps_its_own,
}



# ---------------------------------------------------------------- attention_backward
def attention_back(q, k, v, probs, dy, scale, *, row_term=True, scaled=True, transpose_k=True, transpose_p=True,
                   axis=-1, swap=False, scale_dv=False):
    dprobs = dy @ v.swapaxes(-1, -2)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=axis, keepdims=True)) if row_term else probs * dprobs
    s = scale if scaled else 1.0
    dq = s * (dscores @ k)
    dk = s * ((dscores.swapaxes(-1, -2) if transpose_k else dscores) @ q)
    dv = (probs.swapaxes(-1, -2) if transpose_p else probs) @ dy * (scale if scale_dv else 1.0)
    return (dk, dq, dv) if swap else (dq, dk, dv)


ATTENTION_WRONG = {
    "forgets the softmax's row term (dS = P ⊙ dP)": lambda *a: attention_back(*a, row_term=False),
    "forgets the 1/√D scale in dq and dk": lambda *a: attention_back(*a, scaled=False),
    "dk from dS, not dSᵀ": lambda *a: attention_back(*a, transpose_k=False),
    "dv from P, not Pᵀ": lambda *a: attention_back(*a, transpose_p=False),
    "the row term sums over the wrong axis": lambda *a: attention_back(*a, axis=-2),
    "returns dk and dq swapped": lambda *a: attention_back(*a, swap=True),
    "scales dv too": lambda *a: attention_back(*a, scale_dv=True),
}

CATALOGUES = [Catalogue("average_gradients", check_average_gradients, reference_average_gradients, WRONG),
              Catalogue("attention_backward", check_attention_backward, reference_attention_backward, ATTENTION_WRONG)]
test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
