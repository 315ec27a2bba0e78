"""The learner's pieces carry into the capstone: kept by their checks in earlier lessons, run by the MPI ranks,
reported as theirs; a broken piece is named."""

import numpy as np
import pytest

from mlsys_lab import pieces
from mlsys_lab.capstone.launch import run_data_parallel
from mlsys_lab.capstone.model import GPTConfig
from mlsys_lab.capstone.stack import active_pieces, load_stack, pieces_rows
from mlsys_lab.capstone.train import RunConfig
from mlsys_lab.exercises.collectives import check_ring_allreduce
from mlsys_lab.mpi import find_mpiexec

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")
CONFIG = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=2, context=32), batch_size=7, lr=1e-2)

def test_without_pieces_the_course_runs_and_says_so(piece_store, capsys):
    stack = load_stack()
    assert set(stack.whose.values()) == {"the course's"}
    assert capsys.readouterr().out.count("the course's (yours is not written yet)") == len(active_pieces())


def test_a_passing_check_keeps_the_learners_function_with_the_modules_it_reads(piece_store, keep_every_piece, capsys):
    keep_every_piece()
    stack = load_stack()
    assert set(stack.whose.values()) == {"yours"}
    assert all(row["runs"] == "yours" or row["runs"].startswith("not here: ") for row in pieces_rows())
    out = capsys.readouterr().out
    assert "ring_allreduce: yours (lesson 07 collectives" in out and "average_gradients: yours (lesson 12" in out
    assert getattr(stack.lora_forward, "is_yours", False) and getattr(stack.lora_backward, "is_yours", False)
    ring = stack.ring_allreduce  # its cell reads np, imported in the notebook's first cell: it came along
    from mlsys_lab.collectives.network import Network
    assert np.array_equal(ring([np.arange(5.0), np.ones(5)], Network(2))[1], np.arange(5.0) + 1)


@needs_mpi
def test_the_mpi_ranks_run_the_learners_pieces_and_end_where_the_course_pieces_do(piece_store, keep_every_piece,
                                                                                  tmp_path):
    keep_every_piece()
    theirs = run_data_parallel(CONFIG, 6, n_ranks=2, folder=tmp_path, every=3)
    assert set(theirs["pieces"].values()) == {"yours"} and theirs["checkpoints"] == [3, 6]
    ours = run_data_parallel(CONFIG, 6, n_ranks=2, course_pieces=True)
    assert np.array_equal(theirs["theta"], ours["theta"])  # the solutions compute what the course's pieces do


@needs_mpi
def test_a_broken_piece_is_named_when_the_ranks_run_it(piece_store, learner, capsys):
    source = learner.source("07_collectives.ipynb", "ring_allreduce")
    check_ring_allreduce(learner.define(source, "ring_allreduce"))
    record = piece_store / "ring_allreduce.json"
    record.write_text(record.read_text().replace("return work", "return work[5]"))  # breaks after it was checked
    with pytest.raises(RuntimeError, match=r"your ring_allreduce raised IndexError.*use_course\('ring_allreduce'\)"):
        run_data_parallel(CONFIG, 2, n_ranks=2)
    pieces.use_course("ring_allreduce")
    assert run_data_parallel(CONFIG, 2, n_ranks=2)["pieces"]["ring_allreduce"] == "the course's"
