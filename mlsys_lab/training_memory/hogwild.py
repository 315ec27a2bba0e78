"""Hogwild! (Niu, Recht, Ré, Wright 2011): parallel SGD on shared weights, with no locks at all.

Every worker reads the shared weights, computes the gradient of one example, and adds its update
coordinate by coordinate (an atomic add per coordinate, no lock around the whole step). Updates
computed from the same snapshot overwrite nothing, but each was computed on weights that the other
workers are changing: staleness. When examples are sparse (each touches nnz ≪ d coordinates), two
concurrent updates rarely share a coordinate and Hogwild! converges like serial SGD; when they are
dense (transformers: every gradient touches every weight), every update collides with every other.

The simulation below is deterministic: in each round P workers read one snapshot, then all their
updates are applied. Numbers are NumPy on the host.
"""

from __future__ import annotations

import math

import numpy as np

from mlsys_lab.validation import check_array, check_int, check_number, check_positive


def overlap_probability(n_params: int, nnz: int, n_workers: int) -> float:
    """P(an update shares a coordinate with at least one of the other P − 1 concurrent updates).

    Supports are nnz coordinates drawn uniformly without replacement:
    1 − [C(d − nnz, nnz) / C(d, nnz)]^(P−1) ≈ 1 − exp(−nnz²·(P−1)/d).
    """
    d = check_int("n_params", n_params, low=1)
    k = check_int("nnz", nnz, low=1, high=d)
    p = check_int("n_workers", n_workers, low=1)
    if 2 * k > d:
        return 1.0 if p > 1 else 0.0
    log_disjoint = sum(math.log((d - k - i) / (d - i)) for i in range(k))
    return 1.0 - math.exp((p - 1) * log_disjoint)


def sparse_regression(n_examples: int, n_params: int, nnz: int, seed: int = 0):
    """Least-squares data: each row has ``nnz`` nonzeros; targets from a hidden weight vector, no noise.

    Returns (indices (n, nnz) int, values (n, nnz), targets (n,), true weights (d,)).
    """
    check_int("n_examples", n_examples, low=1, high=10**7)
    d = check_int("n_params", n_params, low=1, high=10**8)
    k = check_int("nnz", nnz, low=1, high=d)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    indices = np.stack([g.choice(d, k, replace=False) for _ in range(n_examples)])
    values = g.standard_normal((n_examples, k)) / math.sqrt(k)
    w_true = g.standard_normal(d)
    return indices, values, (values * w_true[indices]).sum(axis=1), w_true


def hogwild_sgd(indices, values, targets, *, n_workers: int, lr: float, n_updates: int, seed: int = 0,
                n_points: int = 50):
    """Run ``n_updates`` example updates, ``n_workers`` at a time from one snapshot; lock-free adds.

    Returns (updates done at each of ``n_points`` checkpoints, mean squared error there, fraction of
    updates that shared a coordinate with another update of their round).
    """
    indices = check_array("indices", indices, ndim=2, kinds="iu")
    values = check_array("values", values, ndim=2, kinds="f", shape=indices.shape)
    check_array("targets", targets, ndim=1, kinds="f", shape=(indices.shape[0],))
    check_int("n_workers", n_workers, low=1, high=4096)
    check_number("lr", lr, low=0.0, high=10.0, low_inclusive=False)
    check_int("n_updates", n_updates, low=1, high=10_000_000)
    check_int("seed", seed, low=0)
    check_int("n_points", n_points, low=1)
    p = check_int("n_workers", n_workers, low=1)
    check_positive("lr", lr)
    check_int("n_updates", n_updates, low=1)
    g = np.random.default_rng(seed)
    w = np.zeros(int(indices.max()) + 1)
    n_rounds = max(n_updates // p, 1)
    record_at = set(np.linspace(1, n_rounds, min(n_points, n_rounds)).astype(int).tolist())
    done, losses, collided, applied = [], [], 0, 0
    for round_index in range(1, n_rounds + 1):
        rows = g.integers(0, len(targets), p)
        snapshot = w.copy()  # every worker of the round reads the same weights
        idx, val = indices[rows], values[rows]  # (p, nnz)
        residual = (val * snapshot[idx]).sum(axis=1) - targets[rows]
        np.add.at(w, idx.ravel(), (-lr * residual[:, None] * val).ravel())  # per-coordinate atomic adds
        counts = np.bincount(idx.ravel(), minlength=w.size)
        collided += int((counts[idx] > 1).any(axis=1).sum())
        applied += p
        if round_index in record_at:
            done.append(applied)
            losses.append(float(np.mean(((values * w[indices]).sum(axis=1) - targets) ** 2)))
    return np.array(done), np.array(losses), collided / applied
