"""Patch-parallel DDIM with stale remote activations, on Gaussian data where the sampler is exact."""

import numpy as np
import pytest

from mlsys_lab.collectives.displaced_patches import alpha_bar_schedule, ddim_sample, smooth_covariance, staleness_error


def test_schedule_runs_from_noisiest_to_cleanest():
    a = alpha_bar_schedule(50)
    assert len(a) == 50 and (np.diff(a) > 0).all()
    assert a[-1] == pytest.approx(1 - 1e-4)  # t = 0: one step of β_min
    assert a[0] == pytest.approx(np.prod(1 - np.linspace(1e-4, 0.02, 1000)))


def test_synchronous_sampler_draws_from_the_data_distribution():
    sigma = smooth_covariance(32)
    x = ddim_sample(np.random.default_rng(0).standard_normal((32, 8000)), sigma, 200)
    sample_cov = x @ x.T / x.shape[1]
    assert np.linalg.norm(sample_cov - sigma) / np.linalg.norm(sigma) < 0.08  # sampling noise ~ sqrt(32/8000)


def test_one_patch_is_exactly_synchronous_and_staleness_error_follows_steps_and_patches():
    assert staleness_error(n_patches=1) == 0.0
    by_steps = [staleness_error(n_steps=s, n_patches=4) for s in (10, 20, 50, 100)]
    assert all(a > b for a, b in zip(by_steps, by_steps[1:], strict=False))  # less change per step, less error
    by_patches = [staleness_error(n_steps=50, n_patches=p) for p in (2, 4, 8)]
    assert all(a < b for a, b in zip(by_patches, by_patches[1:], strict=False))  # more stale neighbours


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="n_patches must be an integer between 1 and 16"):
        ddim_sample(np.zeros((16, 1)), smooth_covariance(16), 10, n_patches=17)
    with pytest.raises(ValueError, match="n_steps must be an integer between 1 and 1000"):
        alpha_bar_schedule(0)
