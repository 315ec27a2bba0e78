"""Training the capstone's transformer with a mixture of experts in every block, and what its routing did.

The run is :func:`mlsys_lab.capstone.train.run_step`'s, step for step (the same batches and Adam), on a model
whose config holds a :class:`~mlsys_lab.capstone.moe.MoeConfig`. What the routing decided is read from the routing
piece itself: the run wraps ``ops.route_with_capacity`` in a recorder, so every block's (indices, kept) of every
step is the one the forward pass used; the auxiliary loss is ``ops.aux_loss`` of the router logits it was given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from mlsys_lab.capstone.model import GPTConfig, ModelOps, count_params, course_ops, init_theta, loss_and_grad
from mlsys_lab.capstone.moe import routing_stats
from mlsys_lab.capstone.train import RunConfig, RunLog, TrainState, fresh_run, run_step, splits
from mlsys_lab.validation import check_array, check_int, check_number, check_sequence, check_type


@dataclass
class MoeLog(RunLog):
    """A run's losses (with α · the auxiliary loss, if any) and seconds, and per step: the share of (token, expert)
    pairs dropped by capacity (mean over blocks), each block's expert load (the share of the kept pairs each expert
    took), (n_layers, n_experts), Switch's auxiliary loss N · Σ fᵢ Pᵢ without α (mean over blocks; 1 at balance,
    recorded whatever α) and the largest expert load over the mean load (max over blocks; 1 at balance). With G
    routing groups every group of every block is one row: load is (n_layers · G, n_experts), the means and the max
    are over the groups too."""

    dropped: list[float] = field(default_factory=list)
    load: list[np.ndarray] = field(default_factory=list)
    aux: list[float] = field(default_factory=list)
    max_load: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.dropped = check_sequence("dropped", self.dropped)
        for share in self.dropped:
            check_number("dropped", share, low=0.0, high=1.0)
        self.load = check_sequence("load", self.load)
        for shares in self.load:
            check_array("load", shares, ndim=2, kinds="f")
        for name in ("aux", "max_load"):
            setattr(self, name, check_sequence(name, getattr(self, name)))
            for value in getattr(self, name):
                check_number(name, value, low=0.0, high=1024.0)


class _Recorder:
    """The routing piece, unchanged, keeping what it returned on every call."""

    def __init__(self, route) -> None:
        self.route, self.calls, self.logits = route, [], []

    def __call__(self, logits, k, capacity):
        indices, kept = self.route(logits, k, capacity)
        self.calls.append((np.asarray(indices).copy(), np.asarray(kept, dtype=bool).copy()))
        self.logits.append(logits)
        return indices, kept


def _needs_experts(config: GPTConfig) -> GPTConfig:
    if check_type("config", config, GPTConfig).moe is None:
        raise ValueError("config.moe must be a MoeConfig: this runs a model with experts")
    return config


def train_moe_model(config: RunConfig, n_steps: int, ops: ModelOps | None = None) -> tuple[TrainState, MoeLog]:
    """``n_steps`` steps of a fresh run of ``config`` (its model with experts), recording the routing of each and
    its auxiliary load-balancing loss (added to the loss only when ``config.model.moe.aux_alpha`` > 0)."""
    _needs_experts(check_type("config", config, RunConfig).model)
    check_int("n_steps", n_steps, low=0, high=10**6)
    ops = course_ops() if ops is None else check_type("ops", ops, ModelOps)
    recorder = _Recorder(ops.route_with_capacity)
    ops = replace(ops, route_with_capacity=recorder)
    state, (tokens, _), log = fresh_run(config), splits(), MoeLog()
    n, k = config.model.moe.n_experts, config.model.moe.top_k
    start = time.perf_counter()
    for _ in range(n_steps):
        recorder.calls.clear()
        recorder.logits.clear()
        log.losses.append(run_step(state, config, tokens, ops))
        stats = [routing_stats(indices, kept, n) for indices, kept in recorder.calls]
        log.dropped.append(float(np.mean([dropped for dropped, _ in stats])))
        log.load.append(np.array([load for _, load in stats]))
        log.aux.append(float(np.mean([ops.aux_loss(logits, k)[0] for logits in recorder.logits])))
        log.max_load.append(float(n * log.load[-1].max()))
    log.seconds = time.perf_counter() - start
    return state, log


def moe_gradient_check(config: GPTConfig, batch: int = 2, n_coords: int = 200, seed: int = 0, step: float = 1e-6,
                       ops: ModelOps | None = None) -> dict:
    """:func:`~mlsys_lab.capstone.model.loss_and_grad` of a model with experts against central differences on
    ``n_coords`` random coordinates of a perturbed θ, random tokens, float64. The routing is piecewise constant: a
    coordinate whose ±step changes any routing decision (a tie crossed) is left out and counted."""
    if _needs_experts(config).dtype != "float64":
        raise ValueError(f"config.dtype must be float64 for a central-difference check; got {config.dtype}")
    check_int("batch", batch, low=1, high=64)
    check_int("n_coords", n_coords, low=1, high=100_000)
    check_number("step", step, low=0.0, low_inclusive=False, high=1.0)
    ops = course_ops() if ops is None else check_type("ops", ops, ModelOps)
    recorder = _Recorder(ops.route_with_capacity)
    ops = replace(ops, route_with_capacity=recorder)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    theta = init_theta(config, seed) + g.normal(0.0, 0.05, count_params(config))
    idx, targets = (g.integers(0, config.vocab_size, (batch, config.context)) for _ in range(2))

    def loss_and_routing(at):
        recorder.calls.clear()
        recorder.logits.clear()
        loss, grad = loss_and_grad(at, idx, targets, config, ops)
        return loss, grad, [(i.tobytes(), k.tobytes()) for i, k in recorder.calls]

    _, grad, routing = loss_and_routing(theta)
    dropped = float(np.mean([1.0 - kept.mean() for _, kept in recorder.calls]))
    errors, ties = [], 0
    for i in g.choice(theta.size, size=min(n_coords, theta.size), replace=False):
        bump = np.zeros_like(theta)
        bump[i] = step
        plus, _, routing_plus = loss_and_routing(theta + bump)
        minus, _, routing_minus = loss_and_routing(theta - bump)
        if routing_plus != routing or routing_minus != routing:
            ties += 1
            continue
        errors.append(abs((plus - minus) / (2 * step) - grad[i]))
    return {"max_abs_error": float(max(errors, default=0.0)), "max_gradient": float(np.abs(grad).max()),
            "n_checked": len(errors), "n_routing_changed": ties, "dropped": dropped}
