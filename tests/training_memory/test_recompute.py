"""Does checkpointing give the same gradients with the predicted memory and recompute?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.training_memory.recompute import (
    checkpoint_sweep,
    forward_backward,
    optimal_segment_length,
    predicted_peak_bytes,
    recompute_time_ratio,
)
from mlsys_lab.training_memory.training import make_mlp

N_BLOCKS, WIDTH, BATCH, D_IN, CLASSES = 12, 16, 32, 8, 4


@pytest.fixture(scope="module")
def setup():
    g = np.random.default_rng(0)
    model = make_mlp(D_IN, WIDTH, N_BLOCKS, CLASSES)
    x = xp.asarray(g.normal(size=(BATCH, D_IN)).astype(np.float32))
    labels = xp.asarray(g.integers(0, CLASSES, BATCH))
    stats = forward_backward(model, x, labels)
    reference = [asnumpy(p.grad) for p in model.parameters]
    return model, x, labels, stats, reference


@pytest.mark.parametrize("k", [1, 2, 3, 5, 12])
def test_same_gradients_peak_and_recompute_as_predicted(setup, k):
    model, x, labels, plain, reference = setup
    stats = forward_backward(model, x, labels, k)
    for got, want in zip((asnumpy(p.grad) for p in model.parameters), reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert stats.loss == pytest.approx(plain.loss)
    block, checkpoint = 5 * BATCH * WIDTH * 4, BATCH * WIDTH * 4
    stem, head = BATCH * D_IN * 4, BATCH * (WIDTH + CLASSES) * 4
    assert stats.peak_activation_bytes == predicted_peak_bytes(N_BLOCKS, k, block, checkpoint, stem, head)
    last = N_BLOCKS - (-(-N_BLOCKS // k) - 1) * k
    assert stats.n_block_forwards == N_BLOCKS + (N_BLOCKS - last)


def test_sqrt_n_optimum_and_four_thirds():
    """Chen et al. 2016: with s = c the best peak is 2√n − 1 at k ≈ √n; one more forward costs 4/3."""
    for n in (16, 100, 400):
        k = optimal_segment_length(n, 1.0, 1.0)
        assert predicted_peak_bytes(n, k, 1.0, 1.0) == 2 * np.sqrt(n) - 1
        assert np.sqrt(n) / 2 <= k <= 2 * np.sqrt(n)  # a flat optimum: several k tie
    assert predicted_peak_bytes(100, 1, 1.0, 1.0) == 100  # k = 1 and k = n both keep ~n units
    assert predicted_peak_bytes(100, 100, 1.0, 1.0) == 100
    assert predicted_peak_bytes(100, optimal_segment_length(100, 4.0, 1.0), 4.0, 1.0) == 39  # 2√(n·c·s) − 1
    assert recompute_time_ratio(16, 16) == 1.0
    assert recompute_time_ratio(10**6, 1) == pytest.approx(4 / 3, rel=1e-5)


def test_sweep_has_one_row_per_segment_length_as_forward_backward_gives(setup):
    model, x, labels, _, _ = setup
    sweep = checkpoint_sweep(model, x, labels, warmup=0, repeat=1)
    np.testing.assert_array_equal(sweep.segment_lengths, np.arange(1, N_BLOCKS + 1))
    for k in (1, 4, N_BLOCKS):
        stats = forward_backward(model, x, labels, k)
        assert sweep.peak_activation_bytes[k - 1] == stats.peak_activation_bytes
        assert sweep.n_block_forwards[k - 1] == stats.n_block_forwards
    assert (sweep.step_seconds > 0).all()
    best = int(np.argmin(sweep.peak_activation_bytes)) + 1
    assert sweep.lowest_peak_segment_length == best
    assert sweep.memory_saving == sweep.peak_activation_bytes[-1] / sweep.peak_activation_bytes[best - 1] > 1


def test_bad_segment_length_is_named():
    with pytest.raises(ValueError, match="segment_length"):
        predicted_peak_bytes(4, 5, 1.0, 1.0)


# --- plans over uneven chains: simulate_checkpoint_plan ---------------------------------------------------------

from itertools import combinations  # noqa: E402

from mlsys_lab.exercises.training_memory_references import least_feasible_budget, reference_checkpoint_plan  # noqa: E402
from mlsys_lab.training_memory.recompute import simulate_checkpoint_plan  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_simulated_uniform_plans_peak_as_predicted(n):
    """Do equal layers cut into equal segments peak at predicted_peak_bytes and recompute n − last segment?"""
    for k in range(1, n + 1):
        run = simulate_checkpoint_plan([5] * n, [1] * n, [1] * n, list(range(0, n, k)))
        assert run.peak_bytes == predicted_peak_bytes(n, k, 5.0, 1.0)
        assert run.recompute_cost == n - (n - (len(range(0, n, k)) - 1) * k)


def _all_plans(n):
    for r in range(n):
        for cut in combinations(range(1, n), r):
            yield [0, *cut]


@pytest.mark.parametrize("seed", range(6))
def test_dp_plan_is_the_brute_force_optimum(seed):
    """Is the exercise's DP plan as cheap as the best of all 2^(n−1) plans that fit, and None exactly when none fits?"""
    g = np.random.default_rng(seed)
    n = int(g.integers(1, 10))
    a, c, f = g.integers(5, 40, size=n), g.integers(1, 10, size=n), g.integers(1, 9, size=n)
    least = least_feasible_budget(a, c, f)
    runs = [simulate_checkpoint_plan(a, c, f, p) for p in _all_plans(n)]
    assert least == min(r.peak_bytes for r in runs)
    for budget in (least - 1, least, int(g.integers(least, a.sum() + 1)), int(a.sum())):
        plan = reference_checkpoint_plan(a, c, f, budget)
        fitting = [r.recompute_cost for r in runs if r.peak_bytes <= budget]
        if not fitting:
            assert plan is None
            continue
        run = simulate_checkpoint_plan(a, c, f, plan)
        assert run.peak_bytes <= budget and run.recompute_cost == min(fitting)


@pytest.mark.parametrize(("plan", "text"), [([1], r"segment_starts must ascend strictly from 0"),
                                            ([0, 2, 2], r"segment_starts must ascend strictly"),
                                            ([0, 5], r"segment_starts\[\] must be an integer"),
                                            ([], r"segment_starts must hold")])
def test_bad_plans_name_the_parameter(plan, text):
    with pytest.raises((ValueError, TypeError), match=text):
        simulate_checkpoint_plan([1, 2, 3], [1, 1, 1], [1, 1, 1], plan)
