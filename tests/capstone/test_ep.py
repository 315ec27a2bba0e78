"""Expert parallelism over 2 real MPI ranks ends at the one-process θ of the same model (each rank's shard its own
routing group), on the course's ``ep_dispatch`` or the learner's; it sends what the routing says it must and no
more, one all_to_all a dispatch; a broken dispatch is named, on simulated ranks before the run and on the ranks."""

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from mlsys_lab import pieces
from mlsys_lab.capstone.ep import LocalAllToAll, check_expert_parallel, checked_dispatch, sharded_names
from mlsys_lab.capstone.launch import run_expert_parallel
from mlsys_lab.capstone.model import GPTConfig, course_ops
from mlsys_lab.capstone.moe import MoeConfig, capacity_routing
from mlsys_lab.capstone.moe_train import moe_gradient_check
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.capstone.verify import verify_pieces
from mlsys_lab.exercises.moe import check_ep_dispatch
from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.mpi import find_mpiexec

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")
EP_RTOL = 1e-12  # float64: θ differs only in summation order (÷ N_i then · N_i / N against ÷ N), through Adam
MOE = MoeConfig(n_experts=4, top_k=2, capacity_factor=1.0, routing_groups=2)
F64 = RunConfig(model=GPTConfig(context=16, d_model=32, n_heads=2, n_layers=2, dtype="float64", moe=MOE),
                batch_size=5, lr=1e-2)  # shards of 3 and 2 sequences: unequal groups, the weighting by N_i matters
# the learner's solved ep_dispatch (lesson 11), edited: what is wrong -> (the edits, what checked_dispatch then says)
BROKEN = {
    "drops the last source rank's rows on receipt": (
        [("np.concatenate(recv[j]), np.concatenate([ids[i][j] for i in range(n_ranks)])",
          "np.concatenate(recv[j][:-1]), np.concatenate([ids[i][j] for i in range(n_ranks - 1)])")],
        "2 rows; 4 are routed to it"),
    "sends every token to every rank": (
        [("send.append([rows[chosen // per == j] for j in range(n_ranks)])",
          "send.append([rows for j in range(n_ranks)])"),
         ("ids.append([chosen[chosen // per == j] for j in range(n_ranks)])",
          "ids.append([chosen for j in range(n_ranks)])")],
        "exactly its 1 (token, expert) rows for rank 0's experts are due"),
    "calls all_to_all twice": (
        [("    recv = group.all_to_all(send)", "    group.all_to_all(send)\n    recv = group.all_to_all(send)")],
        "made 2 all_to_all calls; the budget is one per dispatch"),
    "a rank's local experts in reverse order": (
        [("for e in range(per)])", "for e in reversed(range(per))])")],
        "gave rank 0's local expert 0 (global 0) 1 rows; 0 are routed to it"),
}


def relative(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


def broken_source(learner, why: str) -> str:
    """Lesson 11's solved ``ep_dispatch`` with the catalogue's edits for ``why``."""
    source = learner.source("11_moe.ipynb", "ep_dispatch")
    for old, new in BROKEN[why][0]:
        assert old in source, f"the catalogue's edit is not in the solved ep_dispatch: {old}"
        source = source.replace(old, new, 1)
    return source


def one_process_routing(config: RunConfig, n_steps: int):
    """The one-process run of ``config`` and every routing decision it made: (indices, kept) per block and group."""
    calls = []

    def route(logits, k, capacity):
        calls.append(capacity_routing(logits, k, capacity))
        return calls[-1]

    state, log = train(config, n_steps, ops=replace(course_ops(), route_with_capacity=route))
    return state, log, calls


def rank0_traffic(calls, config: RunConfig, n_steps: int) -> tuple[list[int], list[int]]:
    """Per step, the payload bytes rank 0 must send (its pairs for rank 1's experts out and back in both passes,
    rank 1's pairs for its own experts' outputs and input gradients back) and the pairs it drops, from the routing."""
    model, per = config.model, config.model.moe.n_experts // 2
    sent, dropped = [], []
    for step in range(n_steps):
        rows = drops = 0
        for layer in range(model.n_layers):
            (i0, k0), (i1, k1) = calls[4 * step + 2 * layer], calls[4 * step + 2 * layer + 1]
            rows += 2 * int(np.sum(k0 & (i0 >= per))) + 2 * int(np.sum(k1 & (i1 < per)))
            drops += int(np.sum(~k0))
        sent.append(rows * model.d_model * 8)
        dropped.append(drops)
    return sent, dropped


@needs_mpi
def test_float64_two_ranks_end_at_the_one_process_theta_and_send_what_the_routing_says(piece_store):
    run = run_expert_parallel(F64, 6, course_pieces=True)
    single, log, calls = one_process_routing(F64, 6)
    assert relative(run["theta"], single.theta) <= EP_RTOL and relative(run["losses"], log.losses) <= EP_RTOL
    assert run["replica_gap"] == 0.0 and run["rank_tokens"] == [3 * 16, 2 * 16] and run["experts_per_rank"] == 2
    assert run["dispatch_calls"] == [[1] * 4] * 6  # a forward and a backward dispatch per block, one call each
    sent, dropped = rank0_traffic(calls, F64, 6)
    assert run["alltoall_bytes_per_step"] == sent and run["dropped_per_step"] == dropped and sum(dropped) > 0
    assert run["pairs_per_step"] == [2 * 3 * 16 * 2] * 6 and run["pieces"]["ep_dispatch"] == "the course's"
    assert len(run["seconds_per_step"]) == 6 and run["step_seconds"] > 0


@needs_mpi
def test_with_most_pairs_dropped_and_the_balance_loss_it_still_ends_at_the_one_process_theta(piece_store):
    config = replace(F64, model=replace(F64.model, moe=replace(MOE, capacity_factor=0.1, aux_alpha=0.01)))
    run = run_expert_parallel(config, 4, course_pieces=True)
    single, log, calls = one_process_routing(config, 4)
    assert relative(run["theta"], single.theta) <= EP_RTOL and relative(run["losses"], log.losses) <= EP_RTOL
    sent, dropped = rank0_traffic(calls, config, 4)
    assert run["dropped_per_step"] == dropped and min(dropped) > run["pairs_per_step"][0] // 2
    assert run["alltoall_bytes_per_step"] == sent


@needs_mpi
def test_the_learners_ep_dispatch_runs_on_the_ranks_and_trains_the_courses_theta(piece_store, learner, capsys):
    check_ep_dispatch(learner.solved("11_moe.ipynb", "ep_dispatch"))
    assert "✓" in capsys.readouterr().out
    theirs = run_expert_parallel(F64, 3)
    ours = run_expert_parallel(F64, 3, course_pieces=True)
    assert theirs["pieces"]["ep_dispatch"] == "yours" and theirs["dispatch_calls"] == [[1] * 4] * 3
    assert np.array_equal(theirs["theta"], ours["theta"])  # the same rows in the same order: bit for bit


@pytest.mark.parametrize("why", list(BROKEN))
def test_a_broken_ep_dispatch_is_named_on_simulated_ranks_before_any_rank_starts(learner, why):
    with pytest.raises(ValueError, match="your ep_dispatch cannot run on the ranks") as error:
        checked_dispatch(learner.define(broken_source(learner, why), "ep_dispatch"))
    assert BROKEN[why][1] in str(error.value), str(error.value)


@needs_mpi
@pytest.mark.parametrize("why", list(BROKEN))
def test_a_broken_ep_dispatch_fails_the_expert_parallel_check_and_is_named(piece_store, learner, why):
    check_ep_dispatch(learner.solved("11_moe.ipynb", "ep_dispatch"))
    path = piece_store / "ep_dispatch.json"
    record = json.loads(path.read_text())
    record["source"] = broken_source(learner, why)
    path.write_text(json.dumps(record))
    [result] = verify_pieces(stages=("expert parallel",))
    assert not result.passed and result.culprit == "ep_dispatch", result.line
    assert "your ep_dispatch cannot run" in result.detail and "your ep_dispatch is the cause" in result.line


@needs_mpi
def test_the_learners_solved_pieces_pass_the_expert_parallel_check(piece_store, keep_every_piece):
    keep_every_piece()
    [result] = verify_pieces(stages=("expert parallel",))
    assert result.passed and set(result.whose.values()) == {"yours"}, result.line
    assert "all_to_all calls per dispatch: [1]" in result.detail


@needs_mpi
def test_a_dispatch_that_breaks_the_budget_only_on_real_ranks_is_stopped_there(piece_store, learner):
    """The ranks hold the budget themselves: a dispatch that behaves on simulated ranks and calls all_to_all twice
    on real ones ends the job at once, the failing rank's line first."""
    source = learner.source("11_moe.ipynb", "ep_dispatch").replace(
        "    recv = group.all_to_all(send)",
        "    if type(group).__name__ == 'MpiAllToAll':\n        group.all_to_all(send)\n"
        "    recv = group.all_to_all(send)", 1)
    pieces.keep("ep_dispatch", learner.define(source, "ep_dispatch"), "11 moe")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^rank \d failed: .*your ep_dispatch .*all_to_all once per dispatch"):
        run_expert_parallel(F64, 2, timeout_s=120)
    assert time.monotonic() - start < 60


def test_the_course_dispatch_is_lesson_11s_and_checked_dispatch_passes_it(capsys):
    check_ep_dispatch(expert_dispatch)
    assert "✓" in capsys.readouterr().out
    checked_dispatch(expert_dispatch)
    group = LocalAllToAll(2)
    out = expert_dispatch([np.array([[0.0], [1], [2]]), np.array([[3.0], [4]])], [np.array([3, 0, 2]),
                          np.array([1, 3])], 4, 2, group)
    assert [[rows[:, 0].tolist() for rows in rank] for rank in out] == [[[1.0], [3.0]], [[2.0], [0.0, 4.0]]]
    assert group.calls == 1 and group.rows.tolist() == [[1, 2], [1, 1]]


def test_one_process_routing_groups_are_the_ranks_shards_each_with_its_own_capacity():
    single, _, calls = one_process_routing(F64, 1)
    assert [len(i) for i, _ in calls] == [3 * 16, 2 * 16] * 2  # per block: rank 0's shard, then rank 1's
    assert np.bincount(calls[1][0][calls[1][1]], minlength=4).max() <= 16  # ⌈2 · 32 / 4 · 1.0⌉
    whole = replace(F64, model=replace(F64.model, moe=replace(MOE, routing_groups=1)))
    assert relative(train(whole, 1)[0].theta, single.theta) > 1e-6  # one group of 80 tokens routes differently
    assert RunConfig.from_dict(json.loads(json.dumps(F64.to_dict()))) == F64  # how the ranks get the config
    assert sharded_names(F64.model)[:2] == ["h0.moe.fc.w", "h0.moe.fc.b"] and len(sharded_names(F64.model)) == 8


def test_routing_groups_with_the_balance_loss_keep_the_gradient_exact():
    """Each group's auxiliary loss weighted by its share of the tokens, its gradient to that group's logits only."""
    config = GPTConfig(vocab_size=7, context=6, d_model=8, n_heads=2, n_layers=2, dtype="float64",
                       moe=replace(MOE, aux_alpha=0.05))
    report = moe_gradient_check(config, batch=3, n_coords=200)  # groups of 2 and 1 sequences
    assert report["dropped"] > 0.05 and report["n_checked"] >= 190 and report["max_abs_error"] < 1e-8


@pytest.mark.parametrize("call, error, message", [
    (lambda: run_expert_parallel(replace(F64, model=replace(F64.model, moe=None)), 2), ValueError,
     "config.model.moe must be a MoeConfig"),
    (lambda: run_expert_parallel(replace(F64, model=replace(F64.model, moe=replace(MOE, routing_groups=1))), 2),
     ValueError, "config.model.moe.routing_groups must be n_ranks=2"),
    (lambda: check_expert_parallel(replace(F64, model=replace(F64.model, moe=replace(MOE, routing_groups=3))), 3),
     ValueError, "n_ranks must divide config.model.moe.n_experts=4"),
    (lambda: run_expert_parallel(F64, 0), ValueError, "n_steps"),
    (lambda: check_expert_parallel(F64, 6), ValueError, "n_ranks must be an integer"),
    (lambda: checked_dispatch(42), TypeError, "dispatch must be a function"),
    (lambda: MoeConfig(routing_groups=0), ValueError, "routing_groups"),
    (lambda: train(replace(F64, batch_size=1), 1), ValueError, "moe.routing_groups must be at most the batch's 1"),
    (lambda: expert_dispatch([np.ones((2, 3)), np.ones((1, 3))], [np.array([0, 4]), np.array([1])], 4, 2,
                             LocalAllToAll(2)), ValueError, "experts must lie in"),
    (lambda: expert_dispatch([np.ones((2, 3))], [np.array([0, 1])], 4, 2, LocalAllToAll(2)), ValueError, "tokens"),
    (lambda: expert_dispatch([np.ones((1, 3))] * 3, [np.array([0])] * 3, 4, 3, LocalAllToAll(3)), ValueError,
     "n_ranks must divide n_experts=4"),
    (lambda: expert_dispatch([np.ones((2, 3))] * 2, [np.array([0])] * 2, 4, 2, LocalAllToAll(2)), ValueError,
     r"experts\[0\] must name one expert per row"),
    (lambda: expert_dispatch([np.ones((1, 3))] * 2, [np.array([0])] * 2, 4, 2, object()), TypeError, "group"),
    (lambda: LocalAllToAll(0), ValueError, "n_ranks"),
])
def test_bad_input_is_refused_naming_the_parameter(call, error, message):
    with pytest.raises(error, match=message):
        call()
