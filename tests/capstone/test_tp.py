"""Tensor parallelism of the capstone's MLP: the course's ``tp_mlp`` keeps lesson 08's contract, the split MLP's
forward and gradient are the dense ones in float64, a tensor-parallel run ends where the one-process run ends, its
communication is 2 all-reduces per block per step, and bad arguments are refused by name."""

import numpy as np
import pytest

from mlsys_lab.capstone.model import GPTConfig, dense_mlp, dense_mlp_back, init_theta, loss_and_grad, views
from mlsys_lab.capstone.tp import (
    TOLERANCE,
    TensorParallelGroup,
    course_tp_mlp,
    tensor_parallel_mlp,
    tensor_parallel_run,
)
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.nn import gelu

TINY = GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=2, dtype="float64")
RUN = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=2, dtype="float64"), batch_size=5,
                lr=1e-2)


@pytest.mark.parametrize(("p", "shape", "f"), [(1, (2, 3, 4), 8), (2, (1, 3, 4), 8), (4, (2, 2, 5), 8),
                                               (8, (1, 1, 3), 8), (3, (2, 5, 6), 12)])
def test_course_tp_mlp_is_the_dense_mlp_on_every_rank_in_one_all_reduce(p, shape, f):
    g = np.random.default_rng(p)
    x, w1, w2 = g.normal(size=shape), g.normal(size=(shape[-1], f)), g.normal(size=(f, shape[-1]))
    group = TensorParallelGroup(p)
    outs = course_tp_mlp(x, w1, w2, p, group)
    assert len(outs) == p and group.calls == 1
    for out in outs:
        np.testing.assert_allclose(out, gelu(x @ w1) @ w2, rtol=1e-12, atol=1e-12)
    assert group.buffer_bytes == x.nbytes
    ring = group.log.bytes_sent["all_reduce"]  # the busiest rank's: 2(p−1)/p of the buffer, up to chunk rounding
    assert 2 * (p - 1) / p * x.nbytes <= ring <= 2 * (p - 1) * -(-x.size // p) * x.itemsize


def test_course_tp_mlp_passes_lesson_08s_check(piece_store, capsys):
    from mlsys_lab.exercises.parallelism import check_tp_mlp

    check_tp_mlp(course_tp_mlp)
    assert "✓" in capsys.readouterr().out


def _block_input(seed=0):
    w = views(init_theta(TINY, seed=1), TINY)
    w["h0.fc.b"][...] = np.random.default_rng(seed).normal(0, 0.1, size=w["h0.fc.b"].shape)  # not the zero init
    w["h0.out.b"][...] = 0.3
    return np.random.default_rng(seed).normal(size=(3, 4, TINY.d_model)), w


@pytest.mark.parametrize("n_ranks", [1, 2, 4, 32])
def test_the_split_mlp_forward_and_backward_are_the_dense_ones(n_ranks):
    h2, w = _block_input()
    mlp, mlp_back, group = tensor_parallel_mlp(course_tp_mlp, n_ranks)
    y, cache = mlp(h2, w, "h0.")
    y_dense, cache_dense = dense_mlp(h2, w, "h0.")
    np.testing.assert_allclose(y, y_dense, rtol=1e-12, atol=1e-14)
    dy = np.random.default_rng(5).normal(size=y.shape)
    names = ("h0.fc.w", "h0.fc.b", "h0.out.w", "h0.out.b")
    g, g_dense = ({n: np.zeros_like(w[n]) for n in names} for _ in range(2))
    dh2 = mlp_back(dy, cache, w, g, "h0.")
    dh2_dense = dense_mlp_back(dy, cache_dense, w, g_dense, "h0.")
    np.testing.assert_allclose(dh2, dh2_dense, rtol=1e-12, atol=1e-14)
    for name in names:
        np.testing.assert_allclose(g[name], g_dense[name], rtol=1e-12, atol=1e-14, err_msg=name)
    assert group.calls == 2  # g's all-reduce forward, f's backward


def test_the_loss_and_flat_gradient_through_the_split_mlp_are_the_dense_ones():
    theta = init_theta(TINY, seed=3)
    idx = np.array([[1, 2, 3, 4], [0, 6, 5, 1]])
    mlp, mlp_back, group = tensor_parallel_mlp(course_tp_mlp, 2)
    loss, grad = loss_and_grad(theta, idx, idx[:, ::-1], TINY, mlp=mlp, mlp_back=mlp_back)
    loss_dense, grad_dense = loss_and_grad(theta, idx, idx[:, ::-1], TINY)
    assert loss == pytest.approx(loss_dense, rel=1e-12)
    assert np.abs(grad - grad_dense).max() <= 1e-12 * np.abs(grad_dense).max()
    assert group.calls == 2 * TINY.n_layers


def test_the_learners_solved_tp_mlp_runs_the_model(learner):
    theirs = learner.solved("08_parallelism.ipynb", "tp_mlp")
    result = tensor_parallel_run(RUN, 3, n_ranks=4, tp_mlp=theirs)
    assert result["equal"] and result["theta_gap"] <= 1e-12, result["theta_gap"]


def test_a_tensor_parallel_run_ends_where_one_process_ends_and_counts_its_all_reduces():
    result = tensor_parallel_run(RUN, 6, n_ranks=2)
    assert result["theta_gap"] <= TOLERANCE["float64"] == 1e-12 and result["equal"]
    assert result["loss_gap"] <= 1e-12
    b, t, c, layers = RUN.batch_size, RUN.model.context, RUN.model.d_model, RUN.model.n_layers
    assert result["all_reduces"] == 2 * layers  # per step: one forward (g), one backward (f), per block
    assert result["buffer_bytes"] == 2 * layers * b * t * c * 8  # one rank's (B, T, C) float64 buffer each
    assert result["ring_bytes"] == pytest.approx(2 * (2 - 1) / 2 * result["buffer_bytes"])


def test_a_float32_run_stays_within_the_stated_bound():
    config = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=2), batch_size=5, lr=1e-2)
    result = tensor_parallel_run(config, 10, n_ranks=4)
    assert result["equal"] and result["theta_gap"] <= TOLERANCE["float32"] == 1e-3, result["theta_gap"]
    assert result["loss_gap"] <= 1e-5
    assert result["buffer_bytes"] == 2 * 2 * 5 * 16 * 32 * 4


def test_train_without_an_mlp_is_todays_run_bit_for_bit():
    today, today_log = train(RUN, 2)
    dense, dense_log = train(RUN, 2, mlp=dense_mlp, mlp_back=dense_mlp_back)
    assert np.array_equal(today.theta, dense.theta) and today_log.losses == dense_log.losses


def _skips_the_all_reduce(x, w1, w2, n_ranks, group):
    k = w1.shape[1] // n_ranks
    return [gelu(x @ w1[:, r * k:(r + 1) * k]) @ w2[r * k:(r + 1) * k] for r in range(n_ranks)]


def _returns_partials_after_all_reducing(x, w1, w2, n_ranks, group):
    group.all_reduce(_skips_the_all_reduce(x, w1, w2, n_ranks, group))
    return _skips_the_all_reduce(x, w1, w2, n_ranks, group)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: course_tp_mlp(np.ones((1, 2, 3)), np.ones((3, 8)), np.ones((8, 3)), 3, TensorParallelGroup(3)),
     ValueError, "n_ranks must divide w1.shape[1]=8"),
    (lambda: course_tp_mlp(np.ones((1, 2, 3)), np.ones((4, 8)), np.ones((8, 3)), 2, TensorParallelGroup(2)),
     ValueError, "w1 must have shape (3, any)"),
    (lambda: course_tp_mlp(np.ones((1, 2, 3)), np.ones((3, 8)), np.ones((6, 3)), 2, TensorParallelGroup(2)),
     ValueError, "w2 must have shape (8, any)"),
    (lambda: course_tp_mlp(np.ones((2, 3)), np.ones((3, 8)), np.ones((8, 3)), 2, TensorParallelGroup(2)),
     ValueError, "x must have 3 dimensions"),
    (lambda: course_tp_mlp(np.ones((1, 2, 3)), np.ones((3, 8)), np.ones((8, 3)), 2, None),
     TypeError, "group must be a group of ranks"),
    (lambda: course_tp_mlp(np.ones((1, 2, 3)), np.ones((3, 8)), np.ones((8, 3)), 2, TensorParallelGroup(4)),
     ValueError, "n_ranks must be the group's number of ranks (4)"),
    (lambda: TensorParallelGroup(2).all_reduce([np.ones(3)]), ValueError, "buffers must hold one array per rank"),
    (lambda: TensorParallelGroup(0), ValueError, "n_ranks"),
    (lambda: tensor_parallel_mlp("tp_mlp", 2), TypeError, "tp_mlp must be a function"),
    (lambda: tensor_parallel_run(RUN, 2, n_ranks=3), ValueError, "n_ranks must divide F = 4·d_model=128"),
    (lambda: tensor_parallel_run(RUN, 0), ValueError, "n_steps"),
    (lambda: tensor_parallel_run("config", 2), TypeError, "config must be a RunConfig"),
    (lambda: tensor_parallel_run(RUN, 1, tp_mlp=_skips_the_all_reduce), ValueError,
     "tp_mlp must call group.all_reduce exactly once per MLP (Megatron's g); it called it 0 times"),
    (lambda: tensor_parallel_run(RUN, 1, tp_mlp=_returns_partials_after_all_reducing), ValueError,
     "tp_mlp's ranks must all end with the same output"),
    (lambda: train(RUN, 1, mlp=dense_mlp), ValueError, "mlp and mlp_back must be given together"),
])
def test_bad_arguments_are_refused_by_name(call, error, words):
    with pytest.raises(error) as caught:
        call()
    assert words in str(caught.value), str(caught.value)


def test_the_split_mlp_refuses_adapters():
    h2, w = _block_input()
    mlp, _, _ = tensor_parallel_mlp(course_tp_mlp, 2)
    with pytest.raises(ValueError, match="adapters must be None"):
        mlp(h2, w, "h0.", adapters=object())
