"""The two-stage pipeline over 2 MPI ranks trains the capstone's transformer to the single-process θ, in the course's
or the learner's 1F1B order; it stashes min(p − d, m) micro-batches per stage (GPipe's order: m); a malformed or
deadlocking schedule is refused before any rank runs it."""

import time

import numpy as np
import pytest

from mlsys_lab import pieces
from mlsys_lab.capstone.launch import run_pipeline
from mlsys_lab.capstone.model import GPTConfig, count_params, course_ops
from mlsys_lab.capstone.pipeline import course_one_f_one_b, stage_layers, stage_slice, validate_orders
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.mpi import find_mpiexec
from mlsys_lab.parallelism.pp import schedule_ops

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")
F64 = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=2, dtype="float64"), batch_size=5, lr=1e-2)
F32_ONE_LAYER = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=1), batch_size=5, lr=1e-2)
F32_RTOL = 1e-3  # float32: 6 steps land within ~3e-5 of one process (summation order, through Adam's division)
GPIPE = """def one_f_one_b(n_stages, n_microbatches):
    return [[("F", i) for i in range(n_microbatches)] + [("B", i) for i in range(n_microbatches)]
            for _ in range(n_stages)]
"""
SWAPPED_WARMUPS = """def one_f_one_b(n_stages, n_microbatches):
    orders = []
    for d in range(n_stages):
        warmup = min(d, n_microbatches)  # stage 0 waits for a backward that waits for its second forward
        ops = [("F", i) for i in range(warmup)]
        for i in range(n_microbatches - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", i) for i in range(n_microbatches - warmup, n_microbatches)]
        orders.append(ops)
    return orders
"""


def relative(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


def test_the_course_schedule_is_lesson_08s_1f1b():
    for p, m in ((2, 4), (2, 1), (3, 5)):
        assert course_one_f_one_b(p, m) == [[(op.kind, op.microbatch) for op in ops] for ops in schedule_ops(p, m)]
    assert course_one_f_one_b(2, 3) == [[("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)],
                                        [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]]


@pytest.mark.parametrize("orders, message", [
    ([[("F", 0), ("B", 0)]], r"one op list per stage \(n_stages=2"),
    ([[("F", 0), ("F", 1), ("B", 0), ("B", 1)], [("B", 0), ("F", 0), ("F", 1), ("B", 1)]], "runs B 0 before F 0"),
    ([[("F", 0), ("F", 1), ("B", 0)], [("F", 0), ("B", 0), ("F", 1), ("B", 1)]], r"runs B 1 0 times"),
    ([[("F", 0), ("F", 0), ("B", 0), ("B", 1)], [("F", 0), ("B", 0), ("F", 1), ("B", 1)]], r"runs F 0 2 times"),
    ([[("F", 0), ("F", 2), ("B", 0), ("B", 1)], [("F", 0), ("B", 0), ("F", 1), ("B", 1)]], r"micro-batch in \[0, 1\]"),
    ([[("F", 0), ("B", 0), ("F", 1), ("B", 1)], [("F", 0), ("F", 1), ("B", 0), ("B", 1)]], "would deadlock"),
])
def test_a_malformed_or_deadlocking_schedule_is_refused_with_its_reason(orders, message):
    with pytest.raises(ValueError, match=message):
        validate_orders(orders, 2, 2)


def test_the_stages_split_the_blocks_and_theta_into_two_contiguous_parts():
    for layers, first, second in ((1, [0], []), (2, [0], [1]), (3, [0, 1], [2])):
        config = GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=layers)
        assert list(stage_layers(config, 0)) == first and list(stage_layers(config, 1)) == second
        zero, one = stage_slice(config, 0), stage_slice(config, 1)
        assert zero.start == 0 and zero.stop == one.start and one.stop is None
        head = 8 + 8 + 8 * 7  # lnf.g, lnf.b, head.w
        assert (count_params(config) - one.start == head) == (not second)


@needs_mpi
def test_the_pipeline_ends_at_the_single_process_theta_and_stashes_what_1f1b_promises():
    run = run_pipeline(F64, 4, n_microbatches=4, course_pieces=True)
    single, log = train(F64, 4, ops=course_ops())
    assert relative(run["losses"], np.array(log.losses)) <= 1e-12
    assert relative(run["theta"], single.theta) <= 1e-12
    assert run["peak_stashed"] == run["stash_bound"] == [2, 1] and run["schedule"] == "the course's"
    for rank, timeline in enumerate(run["timeline"]):
        assert [(kind, i) for kind, i, _, _ in timeline] == [tuple(op) for op in run["orders"][rank]]
        assert all(0 <= start <= end for _, _, start, end in timeline)


@needs_mpi
def test_float32_with_one_layer_the_head_alone_on_stage_1():
    run = run_pipeline(F32_ONE_LAYER, 6, n_microbatches=5, course_pieces=True)
    single, log = train(F32_ONE_LAYER, 6, ops=course_ops())
    assert relative(run["losses"], np.array(log.losses)) <= 1e-5
    assert relative(run["theta"], single.theta) <= F32_RTOL
    assert run["peak_stashed"] == [2, 1]


@needs_mpi
def test_gpipe_order_trains_the_same_but_stashes_every_microbatch(piece_store, learner):
    pieces.keep("one_f_one_b", learner.define(GPIPE, "one_f_one_b"), "08 parallelism")
    run = run_pipeline(F64, 2, n_microbatches=4)
    single, _ = train(F64, 2, ops=course_ops())
    assert run["schedule"] == "yours" and relative(run["theta"], single.theta) <= 1e-12
    assert run["peak_stashed"] == [4, 4] and run["stash_bound"] == [2, 1]


@needs_mpi
def test_a_deadlocking_schedule_of_the_learners_is_reported_not_run(piece_store, learner):
    pieces.keep("one_f_one_b", learner.define(SWAPPED_WARMUPS, "one_f_one_b"), "08 parallelism")
    start = time.monotonic()
    with pytest.raises(ValueError, match="your one_f_one_b .*would deadlock"):
        run_pipeline(F64, 2, n_microbatches=4, timeout_s=120)
    assert time.monotonic() - start < 60
