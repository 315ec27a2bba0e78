"""The capstone's system checks pass with the learner's solved pieces, and a broken piece fails the check that runs it,
named as the cause: the catalogue of wrong pieces, each broken after its own check had passed (as a learner's later
edit of a kept cell would break it)."""

import pytest

from mlsys_lab.capstone.verify import DEFAULT_STAGES, STAGE_PIECES, STAGES, verify_pieces
from mlsys_lab.exercises.parallelism import check_one_f_one_b
from mlsys_lab.mpi import find_mpiexec

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")

# piece -> (what is wrong with it, the edit of its kept source)
BROKEN = {
    "ring_allreduce": ("one reduce-scatter step short: a chunk misses a rank's share",
                       ("    for step in range(p - 1):  # reduce-scatter",
                        "    for step in range(p - 2):  # reduce-scatter")),
    "average_gradients": ("the plain mean of the ranks' gradients, not weighted by their tokens",
                          ("/ total).reshape(shape)", "/ len(rank_tokens) / int(rank_tokens[r])).reshape(shape)")),
    "layer_norm_backward": ("the y · mean(g · y) term left out",
                            (" - y * (grad_out * y).mean(axis=1, keepdims=True)", "")),
    "crash_safe_writer": ("the last chunk never written: every checkpoint is torn",
                          ("        for chunk in chunks:\n", "        for chunk in list(chunks)[:-1]:\n")),
}


# one_f_one_b's wrong orders (lesson 08's solved cell, edited) -> (the edit, what the pipeline check then says)
BROKEN_SCHEDULES = {
    "B i before F i in the steady state: refused before any rank runs it": (
        ('ops += [("F", warmup + i), ("B", i)]', 'ops += [("B", i), ("F", warmup + i)]'), "runs B 0 before F 0"),
    "stage d warms up d forwards, not p - d - 1: the ranks would deadlock; reported, not hung": (
        ("warmup = min(n_stages - d - 1, n_microbatches)", "warmup = min(d, n_microbatches)"), "would deadlock"),
    "the last micro-batch's backward dropped on stage 0": (
        ("range(n_microbatches - warmup, n_microbatches)]", "range(n_microbatches - warmup, n_microbatches - 1)]"),
        "stage 0 runs B 3 0 times"),
    "GPipe's order, all F then all B: the same θ, but m micro-batches stashed": (
        ("warmup = min(n_stages - d - 1, n_microbatches)", "warmup = n_microbatches"),
        "over 1F1B's min(p − d, m) = [2, 1]"),
}


@pytest.fixture
def keep_every_piece(keep_every_piece, learner, capsys):
    """conftest's, and lesson 08's solved one_f_one_b (the pipeline check's piece) kept by its check."""

    def keep() -> None:
        keep_every_piece()
        check_one_f_one_b(learner.solved("08_parallelism.ipynb", "one_f_one_b"))
        assert "✓" in capsys.readouterr().out

    return keep


# tp_mlp (lesson 08): what is wrong with it, the edit of its kept source; each must fail "tensor parallel"
BROKEN_TP_MLP = [
    ("every rank multiplies the whole W1 and W2: the all-reduced output is p times too big",
     ("mlp(x, w1[:, r * k:(r + 1) * k], w2[r * k:(r + 1) * k, :])", "mlp(x, w1, w2)")),
    ("every rank's columns of W1 met with the first block of W2's rows",
     ("w2[r * k:(r + 1) * k, :]", "w2[:k, :]")),
    ("no all-reduce: each rank returns its own partial output",
     ("return group.all_reduce(partials)", "return partials")),
]


def keep_tp_mlp(learner) -> None:
    """Keep the learner's solved ``tp_mlp`` of lesson 08 (its check passes)."""
    from mlsys_lab.exercises.parallelism import check_tp_mlp

    check_tp_mlp(learner.solved("08_parallelism.ipynb", "tp_mlp"))


def stage_of(piece: str) -> str:
    return next(stage for stage, names in STAGE_PIECES.items() if piece in names)


@needs_mpi
def test_the_learners_solved_pieces_pass_every_check_and_are_reported_as_theirs(piece_store, keep_every_piece,
                                                                                 learner):
    keep_every_piece()
    keep_tp_mlp(learner)
    results = verify_pieces()
    assert list(DEFAULT_STAGES) == list(STAGES)  # all six by default: the lesson prints six verdicts
    assert [r.stage for r in results] == list(DEFAULT_STAGES)
    assert [r.passed for r in results] == [True] * len(DEFAULT_STAGES), [r.line for r in results]
    assert all(set(r.whose.values()) == {"yours"} for r in results), [r.whose for r in results]


@needs_mpi
@pytest.mark.parametrize("piece", list(BROKEN), ids=[f"{k}: {v[0]}" for k, v in BROKEN.items()])
def test_a_broken_piece_fails_its_check_and_is_named(piece_store, keep_every_piece, piece):
    keep_every_piece()
    record = piece_store / f"{piece}.json"
    old, new = BROKEN[piece][1]
    text = record.read_text()
    assert old.replace("\n", "\\n") in text, f"the catalogue's edit is not in the kept source of {piece}"
    record.write_text(text.replace(old.replace("\n", "\\n"), new.replace("\n", "\\n"), 1))
    results = {r.stage: r for r in verify_pieces(stages=(stage_of(piece),))}
    result = results[stage_of(piece)]
    assert not result.passed and result.culprit == piece, result.line
    assert f"your {piece} is the cause" in result.line


@pytest.mark.parametrize("broken", BROKEN_TP_MLP, ids=[why for why, _ in BROKEN_TP_MLP])
def test_a_broken_tp_mlp_fails_the_tensor_parallel_check_and_is_named(piece_store, learner, broken):
    keep_tp_mlp(learner)
    record = piece_store / "tp_mlp.json"
    old, new = broken[1]
    text = record.read_text()
    assert old in text, "the catalogue's edit is not in the kept source of tp_mlp"
    record.write_text(text.replace(old, new, 1))
    (result,) = verify_pieces(stages=("tensor parallel",))
    assert not result.passed and result.culprit == "tp_mlp", result.line
    assert "your tp_mlp is the cause" in result.line


def test_the_learners_solved_tp_mlp_passes_the_tensor_parallel_check(piece_store, learner):
    keep_tp_mlp(learner)
    (result,) = verify_pieces(stages=("tensor parallel",))
    assert result.passed and result.whose == {"tp_mlp": "yours"}, result.line


@needs_mpi
def test_a_rank_that_fails_alone_ends_the_job_at_once(piece_store, keep_every_piece, tmp_path):
    """Rank 0 alone writes checkpoints: a writer that raises there must abort the job, not leave rank 1 waiting in
    an all-reduce until the launcher's time limit."""
    import time

    from mlsys_lab.capstone.launch import run_data_parallel
    from mlsys_lab.capstone.verify import VERIFY_CONFIG

    keep_every_piece()
    record = piece_store / "crash_safe_writer.json"
    text = record.read_text()
    broken = text.replace("    tmp = path.with_name(", "    raise OSError('disk full')\\n    tmp = path.with_name(", 1)
    record.write_text(broken)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="disk full"):
        run_data_parallel(VERIFY_CONFIG, 4, n_ranks=2, folder=tmp_path, every=2, timeout_s=120)
    assert time.monotonic() - start < 60


@needs_mpi
@pytest.mark.parametrize("edit, says", list(BROKEN_SCHEDULES.values()), ids=list(BROKEN_SCHEDULES))
def test_a_broken_schedule_fails_the_pipeline_check_and_is_named(piece_store, keep_every_piece, edit, says):
    import json

    keep_every_piece()
    path = piece_store / "one_f_one_b.json"
    record = json.loads(path.read_text())
    assert edit[0] in record["source"], "the catalogue's edit is not in the kept source of one_f_one_b"
    record["source"] = record["source"].replace(*edit)
    path.write_text(json.dumps(record))
    [result] = verify_pieces(stages=("pipeline",))
    assert not result.passed and result.culprit == "one_f_one_b", result.line
    assert says in result.line and "your one_f_one_b is the cause" in result.line, result.line
