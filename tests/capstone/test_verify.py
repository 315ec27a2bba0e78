"""The capstone's system checks pass with the learner's solved pieces, and a broken piece fails the check that runs it,
named as the cause: the catalogue of wrong pieces, each broken after its own check had passed (as a learner's later
edit of a kept cell would break it)."""

import pytest

from mlsys_lab.capstone.verify import STAGE_PIECES, verify_pieces
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


def stage_of(piece: str) -> str:
    return next(stage for stage, names in STAGE_PIECES.items() if piece in names)


@needs_mpi
def test_the_learners_solved_pieces_pass_every_check_and_are_reported_as_theirs(piece_store, keep_every_piece):
    keep_every_piece()
    results = verify_pieces()
    assert [r.passed for r in results] == [True] * 3, [r.line for r in results]
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
