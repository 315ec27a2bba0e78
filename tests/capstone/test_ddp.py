"""DDP's buckets in the capstone: the layers tile θ, the layer-by-layer backward is loss_and_grad's bit for bit, the
plan is checked, and on 2 MPI ranks the overlapped run ends where the unbucketed one does, bit for bit."""

import numpy as np
import pytest

from mlsys_lab.capstone.ddp import (
    bucketed_backward,
    checked_plan,
    ddp_step,
    fitted_allreduce,
    grad_layer_bytes,
    grad_layers,
)
from mlsys_lab.capstone.launch import run_data_parallel
from mlsys_lab.capstone.model import GPTConfig, count_params, course_ops, init_theta, loss_and_grad
from mlsys_lab.capstone.text import global_batch
from mlsys_lab.capstone.train import RunConfig, splits
from mlsys_lab.exercises.parallelism_ddp import check_ddp_schedule
from mlsys_lab.mpi import find_mpiexec
from mlsys_lab.parallelism.dp import ddp_bucket_schedule

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")
CONFIG = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=3, context=32), batch_size=7, lr=1e-2)


def _batch(model: GPTConfig, rows: int = 3):
    x, y = global_batch(splits()[0], 0, rows, model.context)
    return init_theta(model, seed=1), x, y


@pytest.mark.parametrize("model", [CONFIG.model, GPTConfig(n_layers=1, dtype="float64")])
def test_the_layers_tile_theta_in_forward_order(model):
    layers = grad_layers(model)
    assert [name for name, _ in layers] == ["embeddings", *(f"h{i}" for i in range(model.n_layers)), "head"]
    assert layers[0][1].start == 0 and layers[-1][1].stop == count_params(model)
    assert all(a.stop == b.start for (_, a), (_, b) in zip(layers, layers[1:], strict=False))
    assert sum(grad_layer_bytes(model)) == count_params(model) * np.dtype(model.dtype).itemsize


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_bucketed_backward_is_loss_and_grad_bit_for_bit(dtype):
    model = GPTConfig(**{**CONFIG.model.__dict__, "dtype": dtype})
    theta, x, y = _batch(model)
    order = []
    loss, grad, seconds = bucketed_backward(theta, x, y, model, course_ops(), order.append)
    expected_loss, expected = loss_and_grad(theta, x, y, model, course_ops())
    assert loss == expected_loss and np.array_equal(grad, expected)
    assert order == list(reversed(range(model.n_layers + 2)))  # head first, embeddings last
    assert all(s <= e for s, e in seconds) and all(seconds[i][1] <= seconds[i - 1][0] for i in range(1, len(order)))


def test_the_course_plan_is_ddps_and_passes_the_exercise():
    check_ddp_schedule(ddp_bucket_schedule)
    seconds, sizes = [1e-3, 2e-3, 2e-3, 5e-4], [100, 400, 400, 50]
    plan = checked_plan(ddp_bucket_schedule, seconds, sizes, fitted_allreduce(2), 200, 400)
    assert [layers for layers, _, _ in plan] == [[3, 2], [1], [0]]
    assert plan[0][1] == pytest.approx(2.5e-3) and all(a[2] <= b[1] for a, b in zip(plan, plan[1:], strict=False))


def _early(*args):
    return [(layers, 0.0, end) for layers, _, end in ddp_bucket_schedule(*args)]


def _missing(*args):
    return ddp_bucket_schedule(*args)[:-1]


def _scattered(*args):
    return [([3, 1], 0.01, 0.02), ([2, 0], 0.03, 0.04)]


@pytest.mark.parametrize("schedule, problem", [(_early, "before layer 2's gradient is ready"),
                                               (_missing, "every layer 0 … 3 exactly once"),
                                               (_scattered, "one contiguous slice"),
                                               (lambda *args: None, "list of")])
def test_a_plan_that_cannot_run_is_refused_naming_ddp_schedule(schedule, problem):
    with pytest.raises(ValueError, match="your ddp_schedule") as error:
        checked_plan(schedule, [1e-3, 2e-3, 2e-3, 5e-4], [100, 400, 400, 50], fitted_allreduce(2), 200, 400)
    assert problem in str(error.value)


class _OneRank:
    """A group of one rank (no MPI): all_reduce hands the buffer back."""

    rank, n_ranks = 0, 1

    def all_reduce(self, buffers):
        return [np.array(buffers[0], copy=True)]


@pytest.mark.parametrize("overlap", [True, False])
def test_the_communication_thread_reduces_each_bucket_after_its_layers(overlap):
    model = CONFIG.model
    theta, x, y = _batch(model)
    seconds = [1e-3] * (model.n_layers + 2)
    plan = checked_plan(ddp_bucket_schedule, seconds, grad_layer_bytes(model), fitted_allreduce(2), 8_000, 20_000)
    loss, averaged, timeline = ddp_step(theta, x, y, model, course_ops(), plan, _OneRank(), 96, 96, overlap)
    expected_loss, expected = loss_and_grad(theta, x, y, model, course_ops())
    assert loss == expected_loss and np.array_equal(averaged, expected * 96 / 96)
    end = {name: e for name, _, e in timeline["layers"]}
    assert [label.split(": ")[1] for label, _, _ in timeline["buckets"]] == [
        ",".join(grad_layers(model)[i][0] for i in layers) for layers, _, _ in plan]
    for (_, start, _), (layers, _, _) in zip(timeline["buckets"], plan, strict=True):
        assert start >= end[grad_layers(model)[layers[-1]][0]]
    if not overlap:
        assert min(s for _, s, _ in timeline["buckets"]) >= max(end.values())


@needs_mpi
def test_two_ranks_with_buckets_end_where_the_unbucketed_run_ends_bit_for_bit(piece_store):
    bucketed = run_data_parallel(CONFIG, 5, n_ranks=2, ddp_buckets=True)
    plain = run_data_parallel(CONFIG, 5, n_ranks=2)
    assert np.array_equal(bucketed["theta"], plain["theta"]) and bucketed["losses"] == plain["losses"]
    ddp = bucketed["ddp"]
    assert ddp["schedule"] == "the course's" and ddp["overlap"] and len(ddp["timelines"]) == 2
    assert ddp["plan"] == [list(row) for row in checked_plan(ddp_bucket_schedule, ddp["layer_seconds"],
                                                             ddp["layer_bytes"], fitted_allreduce(2))]
    planned = [",".join(ddp["layers"][i] for i in layers) for layers, _, _ in ddp["plan"]]
    for timeline in ddp["timelines"]:
        end = {name: e for name, _, e in timeline["layers"]}
        assert [label.split(": ")[1] for label, _, _ in timeline["buckets"]] == planned
        for (_, start, _), (layers, _, _) in zip(timeline["buckets"], ddp["plan"], strict=True):
            assert start >= end[ddp["layers"][layers[-1]]]  # its last gradient was ready
    assert "ddp" not in plain and bucketed["allreduce_calls"] == 5 * len(planned)


@needs_mpi
def test_a_broken_learner_schedule_is_refused_before_any_rank_trains(piece_store, learner):
    check_ddp_schedule(learner.solved("08_parallelism.ipynb", "ddp_schedule"))
    record = piece_store / "ddp_schedule.json"
    assert "start = max(ready[layers[-1]], free)" in record.read_text()
    record.write_text(record.read_text().replace("start = max(ready[layers[-1]], free)", "start = free"))
    with pytest.raises(ValueError, match=r"your ddp_schedule .* cannot run: bucket 0 .* before layer"):
        run_data_parallel(CONFIG, 2, n_ranks=2, ddp_buckets=True)


@needs_mpi
def test_the_learners_schedule_and_ring_run_the_buckets(piece_store, keep_every_piece):
    keep_every_piece()
    theirs = run_data_parallel(CONFIG, 3, n_ranks=2, ddp_buckets=True)
    ours = run_data_parallel(CONFIG, 3, n_ranks=2, ddp_buckets=True, course_pieces=True)
    assert theirs["ddp"]["schedule"] == "yours" and theirs["pieces"]["ring_allreduce"] == "yours"
    assert ours["ddp"]["schedule"] == "the course's"
    assert np.array_equal(theirs["theta"], ours["theta"])
