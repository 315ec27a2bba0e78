"""Training the capstone's transformer on one process: Adam over the flat parameter vector, a run's state, losses.

The state of a run is everything a resume needs and nothing else: θ, Adam's m and v (flat vectors like θ) and the
step count. The data order is a function of the step (:func:`mlsys_lab.capstone.text.global_batch`), so no loader
position is kept. The data-parallel runner (:mod:`.dp_run`) runs this same step with the gradient averaged over
ranks; with the same global batches it ends where this loop ends, up to floating-point summation order.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    dense_mlp,
    dense_mlp_back,
    gpt_forward,
    init_theta,
    loss_and_grad,
)
from mlsys_lab.capstone.moe import MoeConfig
from mlsys_lab.capstone.text import corpus, global_batch
from mlsys_lab.nn import MAX_LR
from mlsys_lab.validation import (
    check_array,
    check_finite,
    check_int,
    check_number,
    check_positive,
    check_sequence,
    check_str,
    check_type,
)

VALIDATION_SHARE = 0.1  # the last 10% of the text is held out


@dataclass(frozen=True)
class RunConfig:
    """A run: the model, the global batch (sequences per step), Adam's learning rate, the seeds."""

    model: GPTConfig = field(default_factory=GPTConfig)
    batch_size: int = 16
    lr: float = 3e-3
    seed: int = 0  # initial weights
    data_seed: int = 0  # the batches' offsets

    def __post_init__(self) -> None:
        check_type("model", self.model, GPTConfig)
        check_int("batch_size", self.batch_size, low=1, high=1 << 20)
        check_number("lr", self.lr, low=0.0, high=MAX_LR, low_inclusive=False)  # past it Adam's loss turns NaN
        check_int("seed", self.seed, low=0)
        check_int("data_seed", self.data_seed, low=0)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(values: dict) -> RunConfig:
        """The inverse of :meth:`to_dict` (how a run's config reaches the MPI ranks, as JSON): the model's
        mixture of experts, when it has one, comes back as a :class:`~mlsys_lab.capstone.moe.MoeConfig`."""
        model = dict(values["model"])
        if isinstance(model.get("moe"), dict):
            model["moe"] = MoeConfig(**model["moe"])
        return RunConfig(**{**values, "model": GPTConfig(**model)})


@dataclass
class TrainState:
    """θ, Adam's first and second moments (flat, like θ) and the number of steps taken."""

    theta: np.ndarray
    m: np.ndarray
    v: np.ndarray
    step: int = 0

    def __post_init__(self) -> None:
        shape = check_array("theta", self.theta, ndim=1, kinds="f", finite=True).shape
        for name in ("m", "v"):
            check_array(name, getattr(self, name), kinds="f", shape=shape, finite=True)
        check_int("step", self.step, low=0)


def fresh_run(config: RunConfig) -> TrainState:
    """Step 0 of a run: θ initialised from ``config.seed``, Adam's moments zero."""
    check_type("config", config, RunConfig)
    theta = init_theta(config.model, config.seed)
    return TrainState(theta, np.zeros_like(theta), np.zeros_like(theta), 0)


def adam_update(state: TrainState, grad: np.ndarray, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                eps: float = 1e-8, part: slice = slice(None)) -> None:
    """One Adam step (Kingma & Ba 2015; :class:`mlsys_lab.nn.Adam`'s rule) on ``state.theta[part]``, in place.

        m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,  θ ← θ − η·m̂/(√v̂ + ε),  m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ)

    with t = ``state.step + 1`` (the caller counts the step). ``grad`` holds the gradient of ``part`` only:
    a ZeRO-1 rank steps its own slice. NumPy always: the ranks are CPU processes.
    """
    check_type("state", state, TrainState)
    check_type("part", part, slice)
    check_array("grad", grad, kinds="f", shape=state.theta[part].shape)
    check_positive("lr", lr)
    check_number("beta1", beta1, low=0.0, high=1.0, high_inclusive=False)
    check_number("beta2", beta2, low=0.0, high=1.0, high_inclusive=False)
    check_positive("eps", eps)
    t = state.step + 1
    m, v, theta = state.m[part], state.v[part], state.theta[part]
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    dtype = theta.dtype.type
    theta -= dtype(lr / (1 - beta1 ** t)) * m / (np.sqrt(v / dtype(1 - beta2 ** t)) + dtype(eps))


def splits(tokens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out tokens: the first 90% of the text and the last 10%."""
    tokens = corpus().tokens if tokens is None else check_array("tokens", tokens, ndim=1, kinds="iu", min_size=2)
    if int(tokens.min()) < 0:
        raise ValueError(f"tokens must be token ids (>= 0); got {int(tokens.min())}")
    cut = int(len(tokens) * (1 - VALIDATION_SHARE))
    return tokens[:cut], tokens[cut:]


def run_step(state: TrainState, config: RunConfig, tokens: np.ndarray, ops: ModelOps | None = None,
             mlp=None, mlp_back=None) -> float:
    """One step on the step's whole global batch; returns its loss before the update. ``mlp`` and ``mlp_back``
    (both or neither) run every block's MLP: :func:`~mlsys_lab.capstone.model.dense_mlp` and its backward when
    None, or a tensor-parallel pair (:func:`mlsys_lab.capstone.tp.tensor_parallel_mlp`)."""
    check_type("state", state, TrainState)
    check_type("config", config, RunConfig)
    mlp, mlp_back = _mlp_pair(mlp, mlp_back)
    x, y = global_batch(tokens, state.step, config.batch_size, config.model.context, config.data_seed)
    loss, grad = loss_and_grad(state.theta, x, y, config.model, ops, mlp=mlp, mlp_back=mlp_back)
    adam_update(state, grad, config.lr)
    state.step += 1
    return loss


def _mlp_pair(mlp, mlp_back) -> tuple:
    """The model's own MLP pair when both are None; a forward and its own backward, given together, else."""
    if (mlp is None) != (mlp_back is None):
        raise ValueError(f"mlp and mlp_back must be given together (a forward and its backward) or both left None; "
                         f"got mlp={type(mlp).__name__} and mlp_back={type(mlp_back).__name__}")
    return (dense_mlp, dense_mlp_back) if mlp is None else (mlp, mlp_back)


def held_out_loss(theta: np.ndarray, config: RunConfig, n_batches: int = 4, ops: ModelOps | None = None) -> float:
    """Mean loss on ``n_batches`` fixed batches of the held-out text (the same batches for every θ)."""
    check_type("config", config, RunConfig)
    check_int("n_batches", n_batches, low=1, high=1000)
    _, held_out = splits()
    losses = []
    for i in range(n_batches):
        x, y = global_batch(held_out, i, config.batch_size, config.model.context, seed=10_000)
        losses.append(loss_and_grad(theta, x, y, config.model, ops)[0])
    return float(np.mean(losses))


@dataclass
class RunLog:
    """What a run measured: the loss of every step, and the wall-clock seconds of the steps."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.losses = check_sequence("losses", self.losses)
        for loss in self.losses:
            check_finite("losses", loss, low=0.0)  # cross-entropies: nats, never negative
        check_finite("seconds", self.seconds, low=0.0)


def train(config: RunConfig, n_steps: int, state: TrainState | None = None, ops: ModelOps | None = None,
          progress=None, mlp=None, mlp_back=None) -> tuple[TrainState, RunLog]:
    """Run ``n_steps`` steps from ``state`` (a fresh one by default); ``progress``: a tqdm-like wrapper or None;
    ``mlp`` and ``mlp_back``: every block's MLP, as :func:`run_step` takes them."""
    check_type("config", config, RunConfig)
    check_int("n_steps", n_steps, low=0, high=10**6)
    mlp, mlp_back = _mlp_pair(mlp, mlp_back)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a tqdm-like wrapper of an iterable, or None; got {type(progress).__name__}")
    state = fresh_run(config) if state is None else check_type("state", state, TrainState)
    tokens, _ = splits()
    log = RunLog()
    steps = range(n_steps) if progress is None else progress(range(n_steps))
    start = time.perf_counter()
    for _ in steps:
        log.losses.append(run_step(state, config, tokens, ops, mlp, mlp_back))
    log.seconds = time.perf_counter() - start
    return state, log


def sample(theta: np.ndarray, config: GPTConfig, prompt: str, n_chars: int, seed: int = 0) -> str:
    """``prompt`` continued by ``n_chars`` characters drawn from the model (temperature 1)."""
    check_type("config", config, GPTConfig)
    check_int("n_chars", n_chars, low=0, high=1000)  # a look at the model, one forward pass per character
    c = corpus()
    ids = list(c.encode(check_str("prompt", prompt)))
    if len(ids) == 0:
        raise ValueError("prompt must hold at least one character")
    g = np.random.default_rng(check_int("seed", seed, low=0))
    for _ in range(n_chars):
        logits, _ = gpt_forward(theta, np.array([ids[-config.context:]]), config)
        p = np.exp(logits[0, -1] - logits[0, -1].max())
        ids.append(int(g.choice(len(p), p=p / p.sum())))
    return c.decode(ids)
