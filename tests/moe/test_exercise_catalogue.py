"""The checks of 11_moe reject plausible wrong answers on every seed and pass the references."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.moe import (
    check_aux_loss,
    check_ep_dispatch,
    check_route_with_capacity,
    check_top_k_gate,
    reference_aux_loss,
    reference_ep_dispatch,
    reference_route,
    reference_top_k_gate,
)
from mlsys_lab.moe.gating import load_balancing_grad


# ---------------------------------------------------------------- route_with_capacity
def route(logits, k, capacity, order="choice", keep=lambda load, c: load < c, worst_first=False, reset=False,
          by_score=False):
    n_tokens, n_experts = logits.shape
    ranking = np.argsort(logits if worst_first else -logits, axis=1, kind="stable")[:, :k]
    kept = np.zeros((n_tokens, k), dtype=bool)
    load = np.zeros(n_experts, dtype=int)
    tokens = list(range(n_tokens))
    if by_score:
        tokens = sorted(tokens, key=lambda t: -logits[t].max())
    if order == "token":
        pairs = [(t, j) for t in tokens for j in range(k)]
    else:
        pairs = [(t, j) for j in range(k) for t in (tokens[::-1] if order == "reversed" else tokens)]
    last = 0
    for t, j in pairs:
        if reset and j != last:
            load[:], last = 0, j
        e = ranking[t, j]
        if keep(load[e], capacity):
            kept[t, j] = True
            load[e] += 1
    return ranking, kept


ROUTE_WRONG = {
    "token-major priority (token 0's choices before token 1's)": lambda lg, k, c: route(lg, k, c, order="token"),
    "keeps one token over capacity (≤ instead of <)": lambda lg, k, c: route(lg, k, c, keep=lambda n, c: n <= c),
    "indices worst first": lambda lg, k, c: route(lg, k, c, worst_first=True),
    "ignores the capacity": lambda lg, k, c: route(lg, k, c, keep=lambda n, c: True),
    "a fresh capacity for each choice level": lambda lg, k, c: route(lg, k, c, reset=True),
    "later tokens first within a level": lambda lg, k, c: route(lg, k, c, order="reversed"),
    "priority by router score (batch-prioritized routing)": lambda lg, k, c: route(lg, k, c, by_score=True),
}


# ---------------------------------------------------------------- top_k_gate
def gate(logits, k, capacity, weights="topk", renormalise=False, slot_order="choice", shape_plus=0, capacity_fn=None):
    n_tokens, n_experts = logits.shape
    indices, kept = route(logits, k, capacity if capacity_fn is None else capacity_fn(capacity),
                          order="token" if slot_order == "token" else "choice")
    if weights == "topk":
        chosen = np.take_along_axis(logits, indices, axis=1)
        w = np.exp(chosen - chosen.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
    elif weights == "all":
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        w = np.take_along_axis(p, indices, axis=1)
    else:
        w = np.ones(indices.shape)
    if renormalise:
        kept_w = np.where(kept, w, 0)
        w = kept_w / np.maximum(kept_w.sum(axis=1, keepdims=True), 1e-300)
    combine = np.zeros((n_tokens, n_experts, capacity + shape_plus))
    load = np.zeros(n_experts, dtype=int)
    pairs = [(t, j) for t in range(n_tokens) for j in range(k)] if slot_order == "token" else \
        [(t, j) for j in range(k) for t in range(n_tokens)]
    for t, j in pairs:
        if kept[t, j] and load[indices[t, j]] < combine.shape[2]:
            combine[t, indices[t, j], 0 if slot_order == "zero" else load[indices[t, j]]] = w[t, j]
            load[indices[t, j]] += 1
    return combine


GATE_WRONG = {
    "Switch-style weights: softmax over all experts": lambda lg, k, c: gate(lg, k, c, weights="all"),
    "renormalises over the kept experts after dropping": lambda lg, k, c: gate(lg, k, c, renormalise=True),
    "weight 1 for every kept pair": lambda lg, k, c: gate(lg, k, c, weights="one"),
    "slots in token-major order": lambda lg, k, c: gate(lg, k, c, slot_order="token"),
    "every pair in slot 0": lambda lg, k, c: gate(lg, k, c, slot_order="zero"),
    "capacity + 1 slots": lambda lg, k, c: gate(lg, k, c, shape_plus=1),
}


# ---------------------------------------------------------------- aux_loss
def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def aux(logits, k, per="pairs", grad="logits", mean=True, n_factor=True, naive=False, worst=False):
    with np.errstate(over="ignore", invalid="ignore"):
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True) if naive else softmax(logits)
    t, n = probs.shape
    idx = np.argsort(probs if worst else -probs, axis=1)[:, :k]
    f = np.bincount(idx.ravel(), minlength=n) / (idx.size if per == "pairs" else t)
    loss = float((n if n_factor else 1) * np.sum(f * probs.mean(axis=0)))
    g = (n if n_factor else 1) * f / (t if mean else 1)
    if grad == "probs":
        return loss, np.broadcast_to(g, probs.shape).copy()
    if grad == "diagonal":
        return loss, probs * (1 - probs) * g
    return loss, probs * (g - (probs * g).sum(axis=1, keepdims=True))


AUX_WRONG = {
    "gradient with respect to the probabilities, not the logits": lambda lg, k: aux(lg, k, grad="probs"),
    "the library's load_balancing_grad (also d/d probs)": lambda lg, k: (
        reference_aux_loss(lg, k)[0], load_balancing_grad(softmax(lg), np.argsort(-lg, axis=1)[:, :k])),
    "Hugging Face's normalisation (f over T, k at balance)": lambda lg, k: aux(lg, k, per="tokens"),
    "forgets the 1/T of the mean in the gradient": lambda lg, k: aux(lg, k, mean=False),
    "softmax Jacobian's diagonal only": lambda lg, k: aux(lg, k, grad="diagonal"),
    "naive softmax (overflows near 800)": lambda lg, k: aux(lg, k, naive=True),
    "leaves out the factor N": lambda lg, k: aux(lg, k, n_factor=False),
    "counts the k least probable experts": lambda lg, k: aux(lg, k, worst=True),
}


# ---------------------------------------------------------------- ep_dispatch
def dispatch(tokens, experts, n_experts, n_ranks, group, how="right"):
    per = n_experts // n_ranks
    if how == "broadcast":                                                      # every rank gets everything
        send = [[np.asarray(tokens[i]) for _ in range(n_ranks)] for i in range(n_ranks)]
        recv = group.all_to_all(send)
        out = []
        for j in range(n_ranks):
            out.append([np.concatenate([recv[j][i][np.asarray(experts[i]) == j * per + e] for i in range(n_ranks)])
                        for e in range(per)])
        return out
    if how == "per expert calls":
        out = [[None] * per for _ in range(n_ranks)]
        for e in range(per):
            send = [[np.asarray(tokens[i])[np.asarray(experts[i]) == j * per + e] for j in range(n_ranks)]
                    for i in range(n_ranks)]
            recv = group.all_to_all(send)
            for j in range(n_ranks):
                out[j][e] = np.concatenate(recv[j])
        return out
    if how == "strided owner":                                                  # expert e on rank e mod p
        send = [[np.asarray(tokens[i])[np.asarray(experts[i]) % n_ranks == j] for j in range(n_ranks)]
                for i in range(n_ranks)]
        recv = group.all_to_all(send)
        out = []
        for j in range(n_ranks):
            owners = np.concatenate([np.asarray(experts[i])[np.asarray(experts[i]) % n_ranks == j]
                                     for i in range(n_ranks)])
            rows = np.concatenate(recv[j])
            out.append([rows[owners == j + n_ranks * e] for e in range(per)])
        return out
    if how == "no sort":                                                        # sends in token order, labels as sorted
        send = [[np.asarray(tokens[i])[np.asarray(experts[i]) // per == j] for j in range(n_ranks)]
                for i in range(n_ranks)]
        recv = group.all_to_all(send)
        out = []
        for j in range(n_ranks):
            rows = np.concatenate(recv[j])
            owners = np.concatenate([np.sort(np.asarray(experts[i])[np.asarray(experts[i]) // per == j])
                                     for i in range(n_ranks)])
            out.append([rows[owners == j * per + e] for e in range(per)])
        return out
    if how == "local only":                                                     # no communication
        return [[np.asarray(tokens[j])[np.asarray(experts[j]) == j * per + e] for e in range(per)]
                for j in range(n_ranks)]
    raise ValueError(how)


def dispatch_reversed_sources(tokens, experts, n_experts, n_ranks, group):
    out = reference_ep_dispatch(tokens[::-1], experts[::-1], n_experts, n_ranks, group)
    return out


EP_WRONG = {
    "broadcasts every token to every rank": lambda *a: dispatch(*a, how="broadcast"),
    "one all-to-all per local expert": lambda *a: dispatch(*a, how="per expert calls"),
    "expert e on rank e mod p (strided, not blocks)": lambda *a: dispatch(*a, how="strided owner"),
    "does not group by expert before sending": lambda *a: dispatch(*a, how="no sort"),
    "keeps only the local tokens (no all-to-all)": lambda *a: dispatch(*a, how="local only"),
    "source ranks in reverse order": dispatch_reversed_sources,
}


CATALOGUES = [
    Catalogue("route_with_capacity", check_route_with_capacity, reference_route, ROUTE_WRONG),
    Catalogue("top_k_gate", check_top_k_gate, reference_top_k_gate, GATE_WRONG),
    Catalogue("aux_loss", check_aux_loss, reference_aux_loss, AUX_WRONG),
    Catalogue("ep_dispatch", check_ep_dispatch, reference_ep_dispatch, EP_WRONG),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
