"""Is the single-device reference right, and does the parameter-wise error say how far two models are?"""

import numpy as np
import pytest

from mlsys_lab.backend import xp
from mlsys_lab.parallelism.model import init_model, loss_and_grads, max_relative_error_of_params, n_params


def test_hand_written_backward_matches_finite_differences(block_problem, block_config):
    """Is the reference backward right? Central differences on every parameter kind."""
    blocks, x, t = block_problem(11, n_layers=1, batch=2, seq=5)
    _, grads = loss_and_grads(x, t, blocks, block_config.head_dim)
    g = np.random.default_rng(3)
    for name, value in blocks[0].items():
        idx = tuple(int(g.integers(n)) for n in value.shape)
        eps = 1e-6
        value[idx] += eps
        up, _ = loss_and_grads(x, t, blocks, block_config.head_dim)
        value[idx] -= 2 * eps
        down, _ = loss_and_grads(x, t, blocks, block_config.head_dim)
        value[idx] += eps
        assert (up - down) / (2 * eps) == pytest.approx(float(grads[0][name][idx]), rel=1e-5, abs=1e-9), name


def test_parameter_count(block_config):
    """Per block: 2 gains of d, 4 attention matrices d², W1 d·f and W2 f·d: 2·16 + 4·256 + 2·512 = 2080."""
    assert n_params(init_model(block_config, 3)) == 3 * 2080


def test_max_relative_error_of_params_is_the_worst_tensor():
    """Two tensors: errors 0.1/2 and 0.3/3; the worst, 0.1, is the answer."""
    ref = [{"a": xp.asarray([1.0, -2.0]), "b": xp.asarray([3.0])}]
    got = [{"a": xp.asarray([1.1, -2.0]), "b": xp.asarray([3.3])}]
    assert max_relative_error_of_params(got, ref) == pytest.approx(0.1)
    assert max_relative_error_of_params(ref, ref) == 0.0
