"""Is the FSDP exercise's model right: its gradients, its shards, and the exercise's reference loop?"""

import numpy as np
import pytest

from mlsys_lab.exercises.parallelism_fsdp import MARK, ShardedGroup, reference_fsdp_step
from mlsys_lab.parallelism.fsdp import (
    layer_backward,
    layer_forward,
    mlp_loss_and_grads,
    sgd_reference,
    shard_flat,
    shard_size,
    unshard_flat,
)


def problem(seed, dims=(3, 5, 4, 2), batch=6):
    g = np.random.default_rng(seed)
    weights = [g.normal(size=(a, b)) for a, b in zip(dims[:-1], dims[1:], strict=True)]
    return g.normal(size=(batch, dims[0])), g.normal(size=(batch, dims[-1])), weights


def test_gradients_match_finite_differences():
    x, t, weights = problem(0)
    _, grads = mlp_loss_and_grads(x, t, weights)
    eps = 1e-6
    for i, w in enumerate(weights):
        for j in np.ndindex(w.shape):
            up = [v.copy() for v in weights]
            down = [v.copy() for v in weights]
            up[i][j] += eps
            down[i][j] -= eps
            numeric = (mlp_loss_and_grads(x, t, up)[0] - mlp_loss_and_grads(x, t, down)[0]) / (2 * eps)
            assert abs(numeric - grads[i][j]) < 1e-7


@pytest.mark.parametrize(("n_elements", "n_ranks"), [(10, 4), (8, 4), (2, 7), (1, 1), (15, 2)])
def test_shards_pad_to_a_multiple_and_round_trip(n_elements, n_ranks):
    w = np.arange(1.0, n_elements + 1).reshape(1, n_elements)
    shards = shard_flat(w, n_ranks)
    k = shard_size(n_elements, n_ranks)
    assert [s.size for s in shards] == [k] * n_ranks and k * n_ranks >= n_elements > (k - 1) * n_ranks
    assert np.concatenate(shards)[n_elements:].tolist() == [0.0] * (k * n_ranks - n_elements)
    assert np.array_equal(unshard_flat(shards, w.shape), w)


def test_layer_backward_needs_the_weights_and_checks_shapes():
    h = np.ones((2, 3))
    out, cache = layer_forward(h, np.ones((3, 4)), last=False)
    assert out.shape == (2, 4) and len(cache) == 3          # activations only, no weights kept
    with pytest.raises(ValueError, match="w must have the layer's shape"):
        layer_backward(np.ones((2, 4)), cache, np.ones((4, 3)))
    with pytest.raises(ValueError, match="dout"):
        layer_backward(np.ones((2, 5)), cache, np.ones((3, 4)))


@pytest.mark.parametrize(("seed", "n"), [(1, 1), (2, 3), (3, 4), (4, 7)])
def test_reference_loop_equals_single_device_sgd_within_budget(seed, n):
    x, t, weights = problem(seed, batch=2 * n)
    layer_shards = [shard_flat(w, n) for w in weights]
    params = [[layer_shards[i][r] for i in range(len(weights))] for r in range(n)]
    group = ShardedGroup(layer_shards)
    new = reference_fsdp_step(np.split(x, n), np.split(t, n), params, [w.shape for w in weights], 0.1, group)
    for i, w in enumerate(sgd_reference(x, t, weights, 0.1)):
        assert np.allclose(unshard_flat([new[r][i] for r in range(n)], w.shape), w, rtol=1e-12, atol=1e-12)
    largest = sorted((n * shard_size(w.size, n) for w in weights), reverse=True)
    assert group.peak_gathered == largest[0] and not group.gathered_layers()
    assert group.bytes_sent == 3 * (n - 1) * sum(shard_size(w.size, n) for w in weights) * 8


def test_group_rejects_what_is_not_a_layer_and_marks_what_it_delivers():
    shards = shard_flat(np.arange(6.0).reshape(2, 3), 2)
    group = ShardedGroup([shards], mark=MARK)
    with pytest.raises(ValueError, match="not the parameter shards"):
        group.all_gather([np.zeros(3), np.zeros(3)])
    full = group.all_gather(shards)
    assert full[0].tolist() == [0, 1, 2, 3 * MARK, 4 * MARK, 5 * MARK]
    with pytest.raises(ValueError, match="not a multiple"):
        group.reduce_scatter([np.ones(3), np.ones(3)])
    group.free(0)
    with pytest.raises(ValueError, match="not gathered"):
        group.free(0)
