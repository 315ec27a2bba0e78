"""A LoRA fine-tune of the trained capstone model: θ frozen, rank-r adapters on every block's linears, Adam on A, B.

The text is a part the base never saw: the last 10% of the corpus (the held-out slice of :func:`.train.splits`);
the fine-tune trains on its first 80% and is judged on its last 20%. The adapters (Hu et al. 2021) sit on the
attention's QKV and output projections and the MLP's two linears of every block (``LoraConfig.targets``), start at
B = 0 (the adapted model *is* the base at step 0) with A ~ N(0, 1/d_in), and their scale is s = α / r.

All of A and B live in one flat vector φ (like θ): Adam's state is two more such vectors, and
:func:`mlsys_lab.capstone.train.adam_update` steps it as it steps θ. Only φ is trained, so its gradient is all
the backward computes: no dW for any frozen weight (:func:`mlsys_lab.capstone.model.loss_and_grad`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.capstone.lora import Adapters
from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    count_params,
    gpt_forward,
    init_theta,
    loss_and_grad,
    param_layout,
    views,
)
from mlsys_lab.capstone.text import global_batch
from mlsys_lab.capstone.train import RunConfig, RunLog, TrainState, adam_update, splits
from mlsys_lab.peft.accounting import lora_params_for_shapes
from mlsys_lab.peft.qlora import lora_linear, lora_linear_backward
from mlsys_lab.validation import check_array, check_int, check_number, check_sequence, check_type

LINEARS = ("attn", "proj", "fc", "out")  # the linears of a block, as param_layout names them
FINETUNE_TRAIN_SHARE = 0.8  # of the held-out slice: the fine-tune's training text; the rest judges it
HELD_OUT_SEED = 20_000  # the fixed batches of the fine-tune's held-out text


@dataclass(frozen=True)
class LoraConfig:
    """The adapters: rank r, α (the scale is s = α / r, Hu et al. 2021, Section 4.1), which linears of every block."""

    rank: int = 4
    alpha: float = 4.0
    targets: tuple = LINEARS

    def __post_init__(self) -> None:
        check_int("rank", self.rank, low=1, high=1 << 12)
        check_number("alpha", self.alpha, low=0.0, low_inclusive=False, high=1e4)
        if not check_sequence("targets", self.targets, min_size=1):
            raise ValueError("targets must name at least one linear")
        for name in self.targets:
            if name not in LINEARS:
                raise ValueError(f"targets must be among {LINEARS}; got {name!r}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def adapter_layout(config: GPTConfig, lora: LoraConfig) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """(layer, A's shape (d_in, r), B's shape (r, d_out)) of every adapter, in the order they sit in φ."""
    check_type("config", config, GPTConfig)
    check_type("lora", lora, LoraConfig)
    shapes = dict(param_layout(config))
    out = []
    for layer in range(config.n_layers):
        for target in lora.targets:
            d_in, d_out = shapes[f"h{layer}.{target}.w"]
            if lora.rank > min(d_in, d_out):
                raise ValueError(f"lora.rank must be at most min(d_in, d_out) = {min(d_in, d_out)}; got {lora.rank}")
            out.append((f"h{layer}.{target}", (d_in, lora.rank), (lora.rank, d_out)))
    return out


def lora_counts(config: GPTConfig, lora: LoraConfig) -> dict[str, int]:
    """Trainable numbers and Adam's state (m and v, in the model's dtype) for LoRA and for full fine-tuning.

    The LoRA count is lesson 10's accounting, r·(d_in + d_out) per adapted weight and block
    (:func:`mlsys_lab.peft.accounting.lora_params_for_shapes`), from the model's own weight shapes.
    """
    shapes = dict(param_layout(check_type("config", config, GPTConfig)))
    block = [shapes[f"h0.{target}.w"] for target in check_type("lora", lora, LoraConfig).targets]
    itemsize = np.dtype(config.dtype).itemsize
    trainable, full = lora_params_for_shapes(block, lora.rank, config.n_layers), count_params(config)
    return {"lora_params": trainable, "full_params": full, "lora_adam_bytes": 2 * itemsize * trainable,
            "full_adam_bytes": 2 * itemsize * full}


def init_adapters(config: GPTConfig, lora: LoraConfig, seed: int = 0) -> np.ndarray:
    """φ at LoRA's start: every A ~ N(0, 1/d_in), every B = 0, flat in :func:`adapter_layout` order."""
    g = np.random.default_rng(check_int("seed", seed, low=0))
    parts = []
    for _, a_shape, b_shape in adapter_layout(config, lora):
        parts += [g.normal(0.0, a_shape[0] ** -0.5, size=a_shape).reshape(-1), np.zeros(b_shape[0] * b_shape[1])]
    return np.concatenate(parts).astype(config.dtype)


def adapters_of(phi: np.ndarray, config: GPTConfig, lora: LoraConfig, forward: Callable = lora_linear,
                backward: Callable = lora_linear_backward) -> Adapters:
    """The adapters whose A and B are views of φ (a step of Adam on φ moves them), run by ``forward``/``backward``."""
    layout = adapter_layout(config, lora)
    size = sum(a[0] * a[1] + b[0] * b[1] for _, a, b in layout)
    check_array("phi", phi, kinds="f", shape=(size,))
    a, b, start = {}, {}, 0
    for name, a_shape, b_shape in layout:
        a[name] = phi[start:start + a_shape[0] * a_shape[1]].reshape(a_shape)
        start += a[name].size
        b[name] = phi[start:start + b_shape[0] * b_shape[1]].reshape(b_shape)
        start += b[name].size
    return Adapters(a, b, lora.scale, forward, backward)


def _flat(grads: dict, adapters: Adapters, dtype) -> np.ndarray:
    """The adapters' {layer: (dA, dB)} as one vector shaped like φ."""
    return np.concatenate([part.reshape(-1) for name in adapters.a for part in grads[name]]).astype(dtype)


def finetune_splits() -> tuple[np.ndarray, np.ndarray]:
    """The fine-tune's text: the base's held-out slice, its first 80% to train on and its last 20% to judge by."""
    _, text = splits()
    cut = int(len(text) * FINETUNE_TRAIN_SHARE)
    return text[:cut], text[cut:]


def lora_held_out_loss(theta: np.ndarray, config: RunConfig, adapters: Adapters | None = None,
                       n_batches: int = 4) -> float:
    """Mean loss on ``n_batches`` fixed batches of the fine-tune's held-out text, with ``adapters`` or without."""
    check_type("config", config, RunConfig)
    check_int("n_batches", n_batches, low=1, high=1000)
    _, held_out = finetune_splits()
    losses = []
    for i in range(n_batches):
        x, y = global_batch(held_out, i, config.batch_size, config.model.context, seed=HELD_OUT_SEED)
        losses.append(_mean_cross_entropy(gpt_forward(theta, x, config.model, adapters)[0], y))
    return float(np.mean(losses))


def _mean_cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
    """The forward's loss alone (no gradient): the same number for the base and the adapted model."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(log_probs, targets[..., None], axis=-1).mean())


def lora_finetune(theta: np.ndarray, config: RunConfig, lora: LoraConfig, n_steps: int,
                  forward: Callable = lora_linear, backward: Callable = lora_linear_backward,
                  ops: ModelOps | None = None, seed: int = 0) -> tuple[TrainState, RunLog]:
    """``n_steps`` Adam steps (``config.lr``, ``config.batch_size``) on φ only, θ frozen, on the fine-tune's text.

    Returns the state of φ (its Adam moments and step count beside it) and the losses; ``adapters_of(state.theta,
    ...)`` gives the adapters. ``forward`` and ``backward``: the LoRA pieces (lesson 10's exercises).
    """
    check_array("theta", theta, ndim=1, kinds="f", shape=(count_params(check_type("config", config, RunConfig).model),))
    check_int("n_steps", n_steps, low=0, high=10**6)
    phi = init_adapters(config.model, lora, seed)
    state = TrainState(phi, np.zeros_like(phi), np.zeros_like(phi), 0)
    adapters = adapters_of(state.theta, config.model, lora, forward, backward)
    tokens, _ = finetune_splits()
    log = RunLog()
    start = time.perf_counter()
    for _ in range(n_steps):
        x, y = global_batch(tokens, state.step, config.batch_size, config.model.context, config.data_seed)
        loss, grads = loss_and_grad(theta, x, y, config.model, ops, adapters)
        adam_update(state, _flat(grads, adapters, phi.dtype), config.lr)
        state.step += 1
        log.losses.append(loss)
    log.seconds = time.perf_counter() - start
    return state, log


def merge_adapters(theta: np.ndarray, adapters: Adapters, config: GPTConfig) -> np.ndarray:
    """A new θ with every adapted weight replaced by W + s·A·B: the plain model that computes the adapted one."""
    merged = check_array("theta", theta, ndim=1, kinds="f").copy()
    check_type("adapters", adapters, Adapters)
    w = views(merged, check_type("config", config, GPTConfig))
    gpt_forward(merged, np.zeros((1, 1), dtype=np.int64), config, adapters)  # checks the adapters fit the config
    for name in adapters.a:
        w[name + ".w"] += adapters.scale * (adapters.a[name] @ adapters.b[name])
    return merged


def lora_gradient_check(config: GPTConfig, lora: LoraConfig, batch: int = 2, n_coords: int = 100, seed: int = 0,
                        step: float = 1e-6, forward: Callable = lora_linear,
                        backward: Callable = lora_linear_backward, ops: ModelOps | None = None) -> dict:
    """The adapters' gradient against central differences on ``n_coords`` random coordinates of φ, on a random θ and
    random A *and* B (with B = 0 dA would be 0), random tokens. Float64 configs only: in float32 the differences
    drown in rounding. Returns the largest absolute error and the largest |gradient|."""
    if check_type("config", config, GPTConfig).dtype != "float64":
        raise ValueError(f"config.dtype must be float64 for a central-difference check; got {config.dtype}")
    check_int("batch", batch, low=1, high=64)
    check_int("n_coords", n_coords, low=1, high=100_000)
    check_number("step", step, low=0.0, low_inclusive=False, high=1.0)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    theta = init_theta(config, seed) + g.normal(0.0, 0.05, count_params(config))
    phi = init_adapters(config, lora, seed)
    phi += g.normal(0.0, 0.3, phi.size)
    adapters = adapters_of(phi, config, lora, forward, backward)
    idx, targets = (g.integers(0, config.vocab_size, (batch, config.context)) for _ in range(2))
    _, grads = loss_and_grad(theta, idx, targets, config, ops, adapters)
    grad = _flat(grads, adapters, phi.dtype)
    coords = g.choice(phi.size, size=min(n_coords, phi.size), replace=False)
    errors = []
    for i in coords:
        saved = phi[i]
        phi[i] = saved + step  # the adapters are views of φ
        plus = loss_and_grad(theta, idx, targets, config, ops, adapters)[0]
        phi[i] = saved - step
        minus = loss_and_grad(theta, idx, targets, config, ops, adapters)[0]
        phi[i] = saved
        errors.append(abs((plus - minus) / (2 * step) - grad[i]))
    return {"max_abs_error": float(max(errors)), "max_gradient": float(np.abs(grad).max()),
            "n_checked": int(coords.size)}
