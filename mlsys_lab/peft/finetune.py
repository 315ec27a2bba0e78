"""Pre-train the tiny transformer on one synthetic task, then fine-tune it on a shifted one, four ways.

Tasks (sequences of ``seq_len`` tokens from a vocabulary of ``vocab``; 4 classes):

* ``pretrain``: which of the tokens 0, 1, 2, 3 occurs most often (the lowest wins ties);
* ``shifted``: the same question about tokens 4, 5, 6, 7 — the base model has learned to count
  tokens 0–3, so fine-tuning must move its features, not only its classifier.

:func:`compare_methods` fine-tunes copies of one pre-trained base with every method for the same
steps and reports accuracy, trainable parameters, optimizer memory and the measured step time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import Adam, Params, accuracy, batches, cross_entropy, n_values
from mlsys_lab.peft.models import (
    DEFAULT_CONFIG,
    METHODS,
    TinyConfig,
    _check_params,
    add_method,
    backward,
    forward,
    init_base,
)
from mlsys_lab.peft.nf4 import nf4_dequantize, nf4_quantize
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import (
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_sequence,
    check_str,
    check_type,
)

TASKS = {"pretrain": (0, 1, 2, 3), "shifted": (4, 5, 6, 7)}
# Picked per method by a small sweep over {3e-3, 1e-2, 3e-2, 1e-1} at 300 steps
# (the papers tune each method too).
LEARNING_RATES = {"full": 3e-3, "head": 1e-2, "adapter": 3e-2, "prefix": 1e-1, "lora": 3e-2}


def make_task(task: str, n_examples: int, config: TinyConfig = DEFAULT_CONFIG, seed: int = 0):
    """(tokens (n, T) int, labels (n,) int) as ``xp`` arrays: label = most frequent of the task's 4 tokens."""
    check_choice("task", task, TASKS)
    check_int("n_examples", n_examples, low=1, high=2**20)
    check_type("config", config, TinyConfig)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    tokens = rng.integers(0, config.vocab, size=(n_examples, config.seq_len))
    counts = np.stack([(tokens == t).sum(axis=1) for t in TASKS[task]], axis=1)
    labels = counts.argmax(axis=1)
    return xp.asarray(tokens), xp.asarray(labels)


def _check_data(data) -> None:
    """``data`` = (tokens (n, T) ints, labels (n,) ints), as :func:`make_task` returns: TypeError naming it."""
    if not isinstance(data, (tuple, list)) or len(data) != 2 or not all(hasattr(a, "shape") for a in data):
        raise TypeError(f"data must be a (tokens, labels) pair of arrays; got {type(data).__name__} {data!r:.40}")
    tokens, labels = data
    if tokens.ndim != 2 or labels.shape != (tokens.shape[0],) or tokens.shape[0] < 1:
        raise ValueError(f"data must be (tokens (n, T), labels (n,)); got shapes {tokens.shape}, {labels.shape}")
    if tokens.dtype.kind not in "iu" or labels.dtype.kind not in "iu":
        raise TypeError(f"data must hold integer tokens and labels; got {tokens.dtype}, {labels.dtype}")


def train_classifier(params: Params, trainable: tuple[str, ...], data, steps: int, lr: float = 1e-2,
                     batch_size: int = 128, seed: int = 0, progress: str | None = None) -> list[float]:
    """Adam on the ``trainable`` parameters of the tiny classifier for ``steps`` mini-batches; the loss per step."""
    check_int("seed", seed, low=0)
    if progress is not None:
        check_str("progress", progress, nonempty=False)
    _check_params("params", params)
    for name in check_sequence("trainable", trainable, min_size=1):
        check_choice("trainable", name, tuple(params))
    _check_data(data)
    check_int("steps", steps, low=1, high=1_000_000)
    check_int("steps", steps, low=1)
    tokens, labels = data
    opt = Adam(trainable, lr=lr)
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    bar = tqdm(total=steps, desc=progress, leave=False, disable=progress is None)
    while len(losses) < steps:
        for idx in batches(int(tokens.shape[0]), batch_size, rng):
            idx = xp.asarray(idx)
            logits, cache = forward(params, tokens[idx])
            loss, dlogits = cross_entropy(logits, labels[idx])
            opt.step(params, backward(params, cache, dlogits, trainable))
            losses.append(loss)
            bar.update(1)
            if len(losses) == steps:
                break
    bar.close()
    return losses


def task_accuracy(params: Params, data) -> float:
    """The classifier's accuracy on ``data`` = (tokens, labels)."""
    _check_params("params", params)
    _check_data(data)
    return accuracy(forward(params, data[0])[0], data[1])


def pretrain_base(config: TinyConfig = DEFAULT_CONFIG, steps: int = 600,
                  seed: int = 0) -> tuple[Params, float]:
    """A base model pre-trained on the ``pretrain`` task; returns (params, held-out accuracy)."""
    params = init_base(config, seed)
    data = make_task("pretrain", 8192, config, seed)
    train_classifier(params, tuple(params), data, steps, lr=3e-3, progress="pre-train")
    return params, task_accuracy(params, make_task("pretrain", 2048, config, seed + 100))


@dataclass(frozen=True)
class FinetuneRun:
    """One fine-tuning method's outcome on the shifted task."""

    method: str
    accuracy: float
    trainable_params: int
    total_params: int
    optimizer_bytes: int
    step_seconds: float
    losses: tuple[float, ...]

    def __post_init__(self) -> None:
        check_str("method", self.method)
        check_number("accuracy", self.accuracy, low=0.0, high=1.0)
        check_int("total_params", self.total_params, low=0)
        if check_int("trainable_params", self.trainable_params, low=0) > self.total_params:
            raise ValueError(f"trainable_params must be at most total_params={self.total_params}; "
                             f"got {self.trainable_params}")
        check_int("optimizer_bytes", self.optimizer_bytes, low=0)
        check_finite("step_seconds", self.step_seconds, low=0.0)
        for loss in check_sequence("losses", self.losses):  # cross-entropies; a diverged run's NaN is its record
            if not isinstance(loss, (int, float)) or isinstance(loss, bool) or loss < 0:
                raise ValueError(f"losses must hold cross-entropies (numbers >= 0); got {loss!r:.40}")


def finetune(base: Params, method: str, steps: int = 400, rank: int = 4, prefix_len: int = 4,
             lr: float = 1e-2, config: TinyConfig = DEFAULT_CONFIG, seed: int = 0) -> FinetuneRun:
    """Fine-tune a copy of ``base`` on the shifted task with ``method``; time one step (median of 10)."""
    _check_params("base", base)
    check_int("steps", steps, low=1, high=1_000_000)
    params, trainable = add_method(base, method, rank=rank, prefix_len=prefix_len)
    data = make_task("shifted", 4096, config, seed + 1)
    losses = train_classifier(params, trainable, data, steps, lr=lr, seed=seed, progress=method)
    acc = task_accuracy(params, make_task("shifted", 2048, config, seed + 200))
    # step time: one more forward + backward + Adam update on a fixed batch, after warm-up
    opt = Adam(trainable, lr=1e-12)  # a real update that leaves the trained model as it is
    batch = (data[0][:128], data[1][:128])

    def one_step():
        logits, cache = forward(params, batch[0])
        opt.step(params, backward(params, cache, cross_entropy(logits, batch[1])[1], trainable))

    seconds = benchmark(one_step, warmup=3, repeat=10).median
    return FinetuneRun(method, acc, n_values(params, trainable), n_values(params, params),
                       opt.state_bytes, seconds, tuple(losses))


def compare_methods(base: Params, methods: tuple[str, ...] = METHODS, steps: int = 400,
                    lr: dict | None = None, **kw) -> list[FinetuneRun]:
    """Fine-tune one copy of ``base`` per method, same data and steps; ``lr`` maps method -> learning rate."""
    _check_params("base", base)
    for method in check_sequence("methods", methods, min_size=1):
        check_choice("methods", method, METHODS)
    check_int("steps", steps, low=1, high=1_000_000)
    rates = {**LEARNING_RATES, **(lr or {})}
    return [finetune(base, m, steps=steps, lr=rates[m], **kw) for m in methods]


def identical_start(base: Params, method: str, data) -> float:
    """Largest |logit difference| between ``base`` and the method's freshly initialised model."""
    _check_params("base", base)
    _check_data(data)
    params, _ = add_method(base, method)
    return float(abs(asnumpy(forward(params, data[0])[0]) - asnumpy(forward(base, data[0])[0])).max())


def inference_variants(d_model: int = 1024, n_tokens: int = 8, rank: int = 8, seed: int = 0) -> dict:
    """Three ways to serve one adapted d×d projection for ``n_tokens`` tokens, as zero-argument callables.

    ``merged``: y = x (W + A B), one GEMM, exactly the base model's cost;
    ``lora unmerged``: y = x W + (x A) B, two extra skinny GEMMs and an add;
    ``adapter``: y = x W, then y + relu(y Ad) Au: the extra GEMMs sit *after* W in series and cannot be
    folded into it because of the nonlinearity (Houlsby adapters' inference latency).
    """
    check_int("d_model", d_model, low=1, high=2**14)
    check_int("n_tokens", n_tokens, low=1, high=2**16)
    check_int("rank", rank, low=1, high=d_model)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    x = xp.asarray(rng.normal(size=(n_tokens, d_model)).astype(np.float32))
    w = xp.asarray(rng.normal(0, d_model**-0.5, size=(d_model, d_model)).astype(np.float32))
    a = xp.asarray(rng.normal(0, d_model**-0.5, size=(d_model, rank)).astype(np.float32))
    b = xp.asarray(rng.normal(0, 0.1, size=(rank, d_model)).astype(np.float32))
    merged = w + a @ b
    return {"merged": lambda: x @ merged,
            "lora unmerged": lambda: x @ w + (x @ a) @ b,
            "adapter": lambda: (lambda y: y + xp.maximum(y @ a, 0) @ b)(x @ w)}


BASE_MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2")  # the linear layers QLoRA stores in NF4


def nf4_base(base: Params, block_size: int = 64) -> Params:
    """A copy of ``base`` whose linear layers hold exactly the values their NF4 codes dequantize to.

    Numerically what QLoRA's forward sees (it dequantizes each block on the fly); the memory saving itself is
    not simulated. Embeddings and the head stay as they are, as in QLoRA.
    """
    _check_params("base", base)
    params = {name: value.copy() for name, value in base.items()}
    for name in BASE_MATRICES:
        w = asnumpy(base[name])
        restored = nf4_dequantize(*nf4_quantize(w, block_size=block_size), block_size=block_size)
        params[name] = xp.asarray(restored.reshape(w.shape).astype(np.float32))
    return params


def qlora_finetune(base: Params, steps: int = 400, lr: float = LEARNING_RATES["lora"], **kw) -> FinetuneRun:
    """LoRA fine-tuning of ``base`` with its linear layers rounded to NF4 (frozen), as QLoRA trains."""
    _check_params("base", base)
    check_int("steps", steps, low=1, high=1_000_000)
    run = finetune(nf4_base(base), "lora", steps=steps, lr=lr, **kw)
    return FinetuneRun("qlora", *[getattr(run, f) for f in ("accuracy", "trainable_params", "total_params",
                                                             "optimizer_bytes", "step_seconds", "losses")])


def step_seconds(base: Params, methods: tuple[str, ...] = ("full", "lora"), batch_size: int = 16, rounds: int = 9,
                 config: TinyConfig = DEFAULT_CONFIG) -> dict[str, dict[str, float]]:
    """Median seconds of the forward, the backward and the Adam update of one step, per method, on this machine.

    CPU seconds of this process (``time.process_time``), which other programs on a shared machine do not
    inflate as they do wall-clock time (run with one BLAS thread: ``mlsys_lab.cpu``). The methods are timed
    in turn, one run of each part per round, so that what slows the machine slows all of them; the median is
    over ``rounds``.
    """
    _check_params("base", base)
    for method in check_sequence("methods", methods, min_size=1):
        check_choice("methods", method, METHODS)
    check_int("rounds", rounds, low=1, high=1000)
    check_int("batch_size", batch_size, low=1, high=4096)
    check_int("rounds", rounds, low=1)
    tokens, labels = make_task("shifted", check_int("batch_size", batch_size, low=1), config, seed=7)
    parts = {}
    for method in methods:
        params, trainable = add_method(base, method)
        opt = Adam(trainable, lr=1e-12)  # a real update that leaves the model as it is
        logits, cache = forward(params, tokens)
        dlogits = cross_entropy(logits, labels)[1]
        grads = backward(params, cache, dlogits, trainable)
        parts[method] = {"forward": lambda p=params: forward(p, tokens),
                         "backward": lambda p=params, c=cache, g=dlogits, t=trainable: backward(p, c, g, t),
                         "update": lambda p=params, o=opt, g=grads: o.step(p, g)}
    samples: dict = {m: {part: [] for part in parts[m]} for m in methods}
    for _ in range(rounds):
        for method in methods:
            for part, fn in parts[method].items():
                fn()  # warm: caches, allocator
                start = time.process_time()
                fn()
                samples[method][part].append(time.process_time() - start)
    return {m: {part: float(np.median(v)) for part, v in samples[m].items()} for m in methods}
