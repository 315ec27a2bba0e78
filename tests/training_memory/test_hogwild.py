"""Does the Hogwild! simulation collide as often as the formula says, and fail only where it should?"""

import numpy as np
import pytest

from mlsys_lab.training_memory.hogwild import hogwild_sgd, overlap_probability, sparse_regression


def test_overlap_probability_by_hand_and_by_sampling():
    assert overlap_probability(4, 1, 2) == pytest.approx(0.25)  # the other worker hits my one coordinate
    assert overlap_probability(100, 10, 1) == 0.0
    assert overlap_probability(10, 6, 2) == 1.0  # 6 + 6 > 10: must share
    g = np.random.default_rng(0)
    d, k, p = 200, 5, 6
    hits = 0
    for _ in range(4000):
        mine = set(g.choice(d, k, replace=False))
        hits += any(mine & set(g.choice(d, k, replace=False)) for _ in range(p - 1))
    assert hits / 4000 == pytest.approx(overlap_probability(d, k, p), abs=0.03)


def test_sparse_converges_like_serial_dense_diverges_with_many_workers():
    sparse = sparse_regression(500, 5000, 10)
    serial = hogwild_sgd(*sparse[:3], n_workers=1, lr=0.5, n_updates=4096)[1][-1]
    parallel, collided = hogwild_sgd(*sparse[:3], n_workers=32, lr=0.5, n_updates=4096)[1:]
    assert parallel[-1] == pytest.approx(serial, rel=0.05)
    assert collided == pytest.approx(overlap_probability(5000, 10, 32), abs=0.05)
    dense = sparse_regression(500, 16, 16)
    assert hogwild_sgd(*dense[:3], n_workers=4, lr=0.5, n_updates=4096)[1][-1] < 1e-6
    assert hogwild_sgd(*dense[:3], n_workers=64, lr=0.5, n_updates=4096)[1][-1] > 1.0
