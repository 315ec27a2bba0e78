"""Gradient compression with error feedback, on a real (small) data-parallel training run.

Top-k sparsification (Aji & Heafield 2017; Lin et al., "Deep Gradient Compression", 2018) sends the
k largest-magnitude entries as (int32 index, float32 value) pairs, exchanged with an all-gather.
PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS 2019) sends a rank-r factorisation of each gradient
matrix M (n×m): P = M·Q, all-reduce P, orthonormalise, Q = Mᵀ·P, all-reduce Q; M ≈ P·Qᵀ costs
r(n + m) numbers instead of n·m. Error feedback (Seide et al. 2014; Karimireddy et al. 2019) keeps
what compression dropped, e ← (g + e) − C(g + e), and adds it to the next step's gradient.

The workers are simulated ranks: every exchange goes through :mod:`.simulate`, so the bytes
reported are the bytes the network counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.collectives.simulate import all_gather, ring_allreduce
from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_sequence,
    check_type,
)

METHODS = ("none", "topk", "powersgd")
MAX_LR = 10.0  # SGD on these problems overflows long before: a larger step is a typo, not an experiment


def top_k(vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest-magnitude entries of a 1-D array: (int32 indices, values)."""
    vector = np.asarray(check_array("vector", vector, ndim=1, min_size=0))
    k = check_int("k", k, low=0)
    if k > vector.size:
        raise ValueError(f"k must be at most the size of vector, {vector.size}; got {k}")
    if k == 0:
        return np.zeros(0, dtype=np.int32), vector[:0].copy()
    index = np.argpartition(np.abs(vector), vector.size - k)[vector.size - k :]
    return index.astype(np.int32), vector[index].copy()


def orthonormalize(matrix: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning ``matrix``'s columns (reduced QR), shape (n, r)."""
    check_array("matrix", matrix, ndim=2)  # no finite check: a diverging run's NaN goes through, as NumPy's QR does
    q, _ = np.linalg.qr(matrix)
    return q


@dataclass(frozen=True)
class LeastSquaresProblem:
    """Multi-output least squares split over workers: worker w holds (X_w: s×n, Y_w: s×m)."""

    features: list[np.ndarray]
    targets: list[np.ndarray]
    true_weights: np.ndarray  # n×m

    def __post_init__(self) -> None:
        n_in, n_out = check_array("true_weights", self.true_weights, ndim=2, finite=True).shape
        features = check_sequence("features", self.features, min_size=1)
        if len(check_sequence("targets", self.targets, min_size=1)) != len(features):
            raise ValueError(f"targets must hold one array per array of features, {len(features)}; "
                             f"got {len(self.targets)}")
        for x, y in zip(features, self.targets, strict=True):
            if check_array("features", x, ndim=2, finite=True).shape[1] != n_in:
                raise ValueError(f"features must be (samples, {n_in}) arrays, n_in of true_weights; got {x.shape}")
            if check_array("targets", y, ndim=2, finite=True).shape != (len(x), n_out):
                raise ValueError(f"targets must be ({len(x)}, {n_out}) arrays, one row per sample; got {y.shape}")

    def loss(self, weights: np.ndarray) -> float:
        """Mean squared error over all workers' data (½‖XW − Y‖² / samples)."""
        residual = [x @ weights - y for x, y in zip(self.features, self.targets, strict=False)]
        return float(sum((r**2).sum() for r in residual) / (2 * sum(len(r) for r in residual)))


def make_least_squares_problem(
    n_workers: int = 4, n_in: int = 32, n_out: int = 16, samples_per_worker: int = 256, seed: int = 0
) -> LeastSquaresProblem:
    """A random linear teacher; each worker's inputs are scaled differently (non-identical data)."""
    n_workers = check_int("n_workers", n_workers, low=1, high=16)
    n_in, n_out = check_int("n_in", n_in, low=1, high=4096), check_int("n_out", n_out, low=1, high=4096)
    samples_per_worker = check_int("samples_per_worker", samples_per_worker, low=1, high=2**16)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    true_weights = g.standard_normal((n_in, n_out)) / np.sqrt(n_in)
    features, targets = [], []
    for _w in range(n_workers):
        scale = np.exp(g.normal(0, 0.5, n_in))  # worker-specific feature scales
        x = g.standard_normal((samples_per_worker, n_in)) * scale
        features.append(x)
        targets.append(x @ true_weights + 0.01 * g.standard_normal((samples_per_worker, n_out)))
    return LeastSquaresProblem(features, targets, true_weights)


@dataclass
class TrainingRun:
    """Loss after every step and the bytes each rank sent per step."""

    method: str
    error_feedback: bool
    losses: np.ndarray
    bytes_per_step: float  # per rank, counted by the simulated network

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_bool("error_feedback", self.error_feedback)
        check_array("losses", self.losses, ndim=1, kinds="f")  # a diverged run's inf/NaN losses are its record
        check_finite("bytes_per_step", self.bytes_per_step, low=0.0)


def train_compressed(
    problem: LeastSquaresProblem,
    method: str = "none",
    error_feedback: bool = True,
    steps: int = 200,
    lr: float = 0.05,
    batch: int = 32,
    k_fraction: float = 0.01,
    rank: int = 1,
    seed: int = 0,
) -> TrainingRun:
    """Data-parallel minibatch SGD; each step every worker's gradient goes through ``method``.

    none: dense ring all-reduce. topk: each worker keeps ⌈k_fraction·n·m⌉ entries, all-gather of
    (index, value). powersgd: rank-``rank`` P and Q all-reduced, warm-started Q (Vogels et al. 2019).
    """
    check_type("problem", problem, LeastSquaresProblem)
    check_choice("method", method, METHODS)
    check_bool("error_feedback", error_feedback)
    steps = check_int("steps", steps, low=1, high=10**6)
    check_number("lr", lr, low=0.0, high=MAX_LR, low_inclusive=False)
    batch = check_int("batch", batch, low=1, high=2**16)
    check_number("k_fraction", k_fraction, low=0.0, high=1.0, low_inclusive=False)
    rank = check_int("rank", rank, low=1, high=min(problem.true_weights.shape))
    g = np.random.default_rng(check_int("seed", seed, low=0))
    n_workers = len(problem.features)
    n_in, n_out = problem.true_weights.shape
    weights = np.zeros((n_in, n_out))
    errors = [np.zeros_like(weights) for _ in range(n_workers)]
    q = g.standard_normal((n_out, rank))
    k = max(1, int(np.ceil(k_fraction * weights.size)))
    losses, sent = [problem.loss(weights)], 0
    for _ in range(steps):
        grads = []
        for x, y in zip(problem.features, problem.targets, strict=False):
            rows = g.integers(0, len(x), batch)
            grads.append(x[rows].T @ (x[rows] @ weights - y[rows]) / batch)  # n_in × n_out
        corrected = [gr + e for gr, e in zip(grads, errors, strict=False)] if error_feedback else grads
        if method == "none":
            result = ring_allreduce([c.ravel().astype(np.float32) for c in corrected])
            update = [result.outputs[0].reshape(weights.shape) / n_workers] * n_workers
            sent += result.bytes_sent[0]
        elif method == "topk":
            picks = [top_k(c.ravel(), k) for c in corrected]
            indices = all_gather([i for i, _ in picks])
            values = all_gather([v.astype(np.float32) for _, v in picks])
            dense = np.zeros(weights.size)
            np.add.at(dense, indices.outputs[0], values.outputs[0])
            update = [dense.reshape(weights.shape) / n_workers] * n_workers
            mine = [np.zeros(weights.size) for _ in range(n_workers)]
            for w, (i, v) in enumerate(picks):
                mine[w][i] = v
            kept = [m.reshape(weights.shape) for m in mine]
            sent += indices.bytes_sent[0] + values.bytes_sent[0]
        else:
            p_sum = ring_allreduce([(c @ q).ravel().astype(np.float32) for c in corrected])
            p = orthonormalize(p_sum.outputs[0].reshape(n_in, rank).astype(np.float64))
            q_sum = ring_allreduce([(c.T @ p).ravel().astype(np.float32) for c in corrected])
            q = q_sum.outputs[0].reshape(n_out, rank).astype(np.float64) / n_workers
            approx = p @ q.T
            update = [approx] * n_workers
            kept = [approx] * n_workers  # Vogels et al., Alg. 2: e_w = M_w − P·Qᵀ (the decompressed mean)
            sent += p_sum.bytes_sent[0] + q_sum.bytes_sent[0]
        if error_feedback and method != "none":
            errors = [c - kk for c, kk in zip(corrected, kept, strict=False)]
        weights -= lr * update[0]
        losses.append(problem.loss(weights))
    return TrainingRun(method, error_feedback, np.array(losses), sent / steps)


def train_stale(
    problem: LeastSquaresProblem, staleness: int, steps: int = 200, lr: float = 0.05, batch: int = 32, seed: int = 0
) -> np.ndarray:
    """Losses of data-parallel SGD where each worker's gradient may be up to ``staleness`` steps old.

    Stale-synchronous parallel (Ho et al. 2013): at step t worker w computes its gradient on the
    weights of step t − d, d drawn uniformly from 0..s; the update averages those gradients.
    s = 0 is ordinary synchronous SGD.
    """
    check_type("problem", problem, LeastSquaresProblem)
    s = check_int("staleness", staleness, low=0, high=10**6)
    steps = check_int("steps", steps, low=1, high=10**6)
    check_number("lr", lr, low=0.0, high=MAX_LR, low_inclusive=False)
    batch = check_int("batch", batch, low=1, high=2**16)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    weights = np.zeros_like(problem.true_weights)
    history, losses = [weights.copy()], [problem.loss(weights)]
    for t in range(steps):
        grads = []
        for x, y in zip(problem.features, problem.targets, strict=False):
            old = history[max(0, t - int(g.integers(0, s + 1)))]
            rows = g.integers(0, len(x), batch)
            grads.append(x[rows].T @ (x[rows] @ old - y[rows]) / batch)
        weights = weights - lr * np.mean(grads, axis=0)
        history.append(weights.copy())
        losses.append(problem.loss(weights))
    return np.array(losses)
