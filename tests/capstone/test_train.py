"""Adam on the flat vector is lesson 06's Adam, and the loss falls on the bundled text."""

import numpy as np

from mlsys_lab.capstone.model import GPTConfig
from mlsys_lab.capstone.train import RunConfig, TrainState, adam_update, fresh_run, held_out_loss, train
from mlsys_lab.nn import Adam


def test_adam_update_is_the_course_adam():
    g = np.random.default_rng(0)
    theta = g.normal(size=10)
    state = TrainState(theta.copy(), np.zeros(10), np.zeros(10))
    params, reference = {"p": theta.copy()}, Adam(lr=0.01)
    for _ in range(4):
        grad = g.normal(size=10)
        adam_update(state, grad, 0.01)
        state.step += 1
        reference.step(params, {"p": grad})
    assert np.allclose(state.theta, params["p"], rtol=1e-12, atol=1e-15)


def test_adam_update_of_a_slice_leaves_the_rest_alone():
    state = TrainState(np.ones(6), np.zeros(6), np.zeros(6))
    adam_update(state, np.ones(2), 0.1, part=slice(2, 4))
    assert np.array_equal(state.theta[[0, 1, 4, 5]], np.ones(4)) and np.all(state.theta[2:4] < 1)


def test_loss_falls_on_the_bundled_text():
    config = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=1, context=32), batch_size=8, lr=1e-2)
    before = held_out_loss(fresh_run(config).theta, config)
    state, log = train(config, 300)
    after = held_out_loss(state.theta, config)
    assert abs(before - np.log(62)) < 0.05  # a fresh model guesses uniformly
    assert after < before - 1.0 and np.mean(log.losses[-10:]) < np.mean(log.losses[:10]) - 1.0, (before, after)
    assert state.step == 300
