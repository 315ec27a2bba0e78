"""Train a small mixture-of-experts classifier by hand, with and without the load-balancing loss.

Task: points from ``n_clusters`` Gaussian clusters; each cluster has its own linear labelling rule,
so no single small network fits all of them but a router that sends each cluster to its own
expert does. Model (T tokens, input width d, n experts of hidden width h, c classes)::

    probs = softmax(x W_g)                         (T, n)  router
    idx   = top-k of probs                         (T, k)  Switch-style gate value: probs[idx]
    out   = Σⱼ probs[idx_j] · E_{idx_j}(x)         (T, c)  E_e(x) = relu(x W1_e + b1_e) W2_e + b2_e
    loss  = CE(out, y) + α · N · Σᵢ fᵢ Pᵢ

The gate value is the router probability itself (not renormalised over the k chosen), so the
router gets a gradient even for k = 1 (Switch Transformer, Section 2.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.moe.gating import expert_fractions, load_balancing_grad, load_balancing_loss, switch_gating
from mlsys_lab.nn import Adam, Params, accuracy, cross_entropy, init_normal
from mlsys_lab.validation import check_array, check_finite, check_int, check_number, check_type


@dataclass(frozen=True)
class MoEClassifierConfig:
    """Sizes of the small MoE classifier and its task (the MoE *layer* of expert parallelism is
    :class:`mlsys_lab.parallelism.ep.MoEConfig`: no task, GeLU experts, renormalised top-k gates)."""

    d_in: int = 16
    n_experts: int = 8
    d_hidden: int = 16
    n_classes: int = 4
    n_clusters: int = 8
    top_k: int = 1

    def __post_init__(self) -> None:
        for name, high in (("d_in", 1024), ("n_experts", 256), ("d_hidden", 1024), ("n_classes", 1024),
                           ("n_clusters", 1024)):  # a small classifier: the bounds keep it small
            check_int(name, getattr(self, name), low=1, high=high)
        check_int("top_k", self.top_k, low=1, high=self.n_experts)


DEFAULT_CLASSIFIER = MoEClassifierConfig()


def make_cluster_task(n_examples: int, config: MoEClassifierConfig = DEFAULT_CLASSIFIER, seed: int = 0):
    """(x (n, d) float32, y (n,) int, cluster (n,) int) as ``xp`` arrays; ``seed`` draws the samples."""
    check_int("n_examples", n_examples, low=1, high=2**20)
    check_type("config", config, MoEClassifierConfig)
    check_int("seed", seed, low=0)
    task_rng = np.random.default_rng(1234)  # the task (centres, rules) is the same for every sample seed
    centres = task_rng.normal(0, 3.0, size=(config.n_clusters, config.d_in))
    rules = task_rng.normal(size=(config.n_clusters, config.d_in, config.n_classes))
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, config.n_clusters, size=n_examples)
    x = centres[cluster] + rng.normal(size=(n_examples, config.d_in))
    y = np.einsum("nd,ndc->nc", x - centres[cluster], rules[cluster]).argmax(axis=1)
    return xp.asarray(x.astype(np.float32)), xp.asarray(y), xp.asarray(cluster)


def init_moe_classifier(config: MoEClassifierConfig = DEFAULT_CLASSIFIER, seed: int = 0) -> Params:
    """Router and expert weights; the router starts small so that early routing is nearly uniform."""
    check_type("config", config, MoEClassifierConfig)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    d, n, h, c = config.d_in, config.n_experts, config.d_hidden, config.n_classes
    return {"w_gate": init_normal(rng, (d, n), 0.01),
            "w1": init_normal(rng, (n, d, h), 1 / math.sqrt(d)), "b1": xp.zeros((n, h), xp.float32),
            "w2": init_normal(rng, (n, h, c), 1 / math.sqrt(h)), "b2": xp.zeros((n, c), xp.float32)}


def _check_classifier(params) -> None:
    """The MoE classifier's parameters (init_moe_classifier): TypeError/ValueError naming ``params``."""
    check_type("params", params, dict)
    missing = [key for key in ("w_gate", "w1", "b1", "w2", "b2") if key not in params]
    if missing:
        raise ValueError(f"params must be what init_moe_classifier returns; {missing} missing")


def moe_classifier_forward(params: Params, x, top_k: int = 1):
    """(out (T, c), cache). Switch-style gates; each expert runs only on the tokens routed to it."""
    _check_classifier(params)
    check_array("x", x, ndim=2, kinds="f", shape=(None, params["w_gate"].shape[0]))
    check_int("top_k", top_k, low=1, high=params["w1"].shape[0])
    probs, idx, gate = switch_gating(x @ params["w_gate"], top_k)        # (T, n), (T, k), (T, k)
    out = xp.zeros((x.shape[0], params["w2"].shape[-1]), x.dtype)
    per_expert = []
    for e in range(params["w1"].shape[0]):
        tok, choice = xp.nonzero(idx == e)                                 # routed (token, choice) pairs
        u = x[tok] @ params["w1"][e] + params["b1"][e]                     # (t_e, h)
        h_out = xp.maximum(u, 0) @ params["w2"][e] + params["b2"][e]       # (t_e, c)
        out[tok] += gate[tok, choice][:, None] * h_out
        per_expert.append((tok, choice, u, h_out))
    return out, {"x": x, "probs": probs, "idx": idx, "gate": gate, "per_expert": per_expert}


def moe_classifier_backward(params: Params, cache: dict, dout, aux_weight: float) -> Params:
    """Gradients of CE + aux_weight · N Σ fᵢ Pᵢ with respect to every parameter."""
    _check_classifier(params)
    check_type("cache", cache, dict)
    for key in ("x", "probs", "gate", "per_expert"):
        if key not in cache:
            raise ValueError(f"cache must be the dict moe_classifier_forward returned (no {key!r})")
    check_array("dout", dout, ndim=2, kinds="f", shape=(cache["x"].shape[0], params["w2"].shape[-1]))
    check_finite("aux_weight", aux_weight, low=0.0)
    x, probs, gate = cache["x"], cache["probs"], cache["gate"]
    g = {name: xp.zeros_like(value) for name, value in params.items()}
    dgate = xp.zeros_like(gate)
    for e, (tok, choice, u, h_out) in enumerate(cache["per_expert"]):
        d_h = gate[tok, choice][:, None] * dout[tok]                       # (t_e, c)
        dgate[tok, choice] = (dout[tok] * h_out).sum(axis=1)
        g["w2"][e], g["b2"][e] = xp.maximum(u, 0).T @ d_h, d_h.sum(axis=0)
        du = (d_h @ params["w2"][e].T) * (u > 0)
        g["w1"][e], g["b1"][e] = x[tok].T @ du, du.sum(axis=0)
    dprobs = xp.zeros_like(probs)
    rows = xp.arange(probs.shape[0])[:, None]
    dprobs[rows, cache["idx"]] = dgate
    if aux_weight:
        dprobs = dprobs + aux_weight * load_balancing_grad(probs, cache["idx"])
    dlogits = probs * (dprobs - (dprobs * probs).sum(axis=1, keepdims=True))
    g["w_gate"] = x.T @ dlogits
    return g


@dataclass(frozen=True)
class MoERun:
    """Per-step history of one training run."""

    aux_weight: float
    load: np.ndarray          # (steps, n_experts): fraction of routed tokens per expert
    aux_loss: np.ndarray      # (steps,): N Σ fᵢ Pᵢ (1 = balanced)
    ce_loss: np.ndarray       # (steps,)
    accuracy: float           # held-out
    expert_of_cluster: np.ndarray  # (n_clusters, n_experts): share of each cluster's tokens per expert

    def __post_init__(self) -> None:
        check_finite("aux_weight", self.aux_weight, low=0.0)
        steps, n_experts = check_array("load", self.load, ndim=2, finite=True).shape
        for name in ("aux_loss", "ce_loss"):  # a diverged run's NaN losses are its record: no finite check
            check_array(name, getattr(self, name), shape=(steps,), kinds="f")
        check_number("accuracy", self.accuracy, low=0.0, high=1.0)
        if check_array("expert_of_cluster", self.expert_of_cluster, ndim=2, finite=True).shape[1] != n_experts:
            raise ValueError(f"expert_of_cluster must have one column per expert, {n_experts} as in load; "
                             f"got shape {self.expert_of_cluster.shape}")


def train_moe(aux_weight: float = 0.01, steps: int = 300, batch_size: int = 256, lr: float = 1e-2,
              config: MoEClassifierConfig = DEFAULT_CLASSIFIER, seed: int = 0) -> MoERun:
    """Adam on every parameter; records the expert load at every step."""
    check_finite("aux_weight", aux_weight, low=0)
    check_int("steps", steps, low=1, high=10**5)
    check_int("batch_size", batch_size, low=1, high=8192)
    check_number("lr", lr, low=0.0, high=1.0, low_inclusive=False)  # Adam moves each weight ~lr per step
    check_type("config", config, MoEClassifierConfig)
    check_int("seed", seed, low=0)
    params = init_moe_classifier(config, seed)
    x_all, y_all, _ = make_cluster_task(8192, config, seed)
    opt = Adam(tuple(params), lr=lr)
    rng = np.random.default_rng(seed)
    load, aux, ce = [], [], []
    for _ in tqdm(range(steps), desc=f"MoE α={aux_weight:g}", leave=False):
        idx = xp.asarray(rng.integers(0, x_all.shape[0], size=batch_size))
        out, cache = moe_classifier_forward(params, x_all[idx], config.top_k)
        loss, dout = cross_entropy(out, y_all[idx])
        opt.step(params, moe_classifier_backward(params, cache, dout, aux_weight))
        load.append(asnumpy(expert_fractions(cache["idx"], config.n_experts)))
        aux.append(load_balancing_loss(cache["probs"], cache["idx"]))
        ce.append(loss)
    x_test, y_test, c_test = make_cluster_task(4096, config, seed + 1)
    out, cache = moe_classifier_forward(params, x_test, config.top_k)
    first = asnumpy(cache["idx"][:, 0])
    c_test = asnumpy(c_test)
    share = np.stack([np.bincount(first[c_test == c], minlength=config.n_experts)
                      / max(1, (c_test == c).sum()) for c in range(config.n_clusters)])
    return MoERun(aux_weight, np.array(load), np.array(aux), np.array(ce), accuracy(out, y_test), share)
