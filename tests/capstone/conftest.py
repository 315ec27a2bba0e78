"""Fixtures of the capstone's tests: a pieces folder of the test's own (MPI ranks inherit it), and the learner's
solved cells of earlier lessons defined as IPython defines a cell's functions (so a passing check keeps them)."""

from __future__ import annotations

import linecache
from pathlib import Path

import nbformat
import pytest

from mlsys_lab import pieces

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def piece_store(tmp_path, monkeypatch):
    """An empty pieces folder for this test: the course's pieces run until a check keeps one."""
    folder = tmp_path / "pieces"
    monkeypatch.setenv(pieces.STORE_ENV, str(folder))
    return folder


class LearnerCells:
    """A solved exercise cell of a lesson notebook, defined from a cell of its own after a setup cell."""

    def __init__(self) -> None:
        self.count = 0

    @staticmethod
    def source(notebook: str, function: str) -> str:
        nb = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)
        return next(c.source for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source
                    and "### BEGIN SOLUTION" in c.source)

    def define(self, source: str, function: str, setup: str = "import numpy as np\nimport os\n"):
        """``function`` from a cell holding ``source``; ``setup`` runs first as an earlier cell (the notebook's
        imports: the kept piece must bring the modules it reads along)."""
        self.count += 1
        namespace: dict = {}
        exec(compile(setup, f"/tmp/ipykernel_0/setup{self.count}.py", "exec"), namespace)
        filename = f"/tmp/ipykernel_0/{self.count:04d}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), namespace)
        return namespace[function]

    def solved(self, notebook: str, function: str):
        return self.define(self.source(notebook, function), function)


@pytest.fixture
def learner() -> LearnerCells:
    return LearnerCells()


def solved_exercises() -> list:
    """(notebook, function, its check) of every piece the capstone runs: the learner's solved cells keep them."""
    from mlsys_lab import backend
    from mlsys_lab.exercises.capstone import check_attention_backward, check_average_gradients
    from mlsys_lab.exercises.collectives import check_ring_allreduce
    from mlsys_lab.exercises.fault_tolerance import check_crash_safe_writer
    from mlsys_lab.exercises.moe import check_aux_loss, check_ep_dispatch, check_route_with_capacity, check_top_k_gate
    from mlsys_lab.exercises.parallelism import check_one_f_one_b, check_tp_mlp
    from mlsys_lab.exercises.parallelism_ddp import check_ddp_schedule
    from mlsys_lab.exercises.peft import check_lora_backward, check_lora_forward
    from mlsys_lab.exercises.training_memory import (
        check_layer_norm_backward,
        check_loss_scaler_step,
        check_softmax_cross_entropy,
        check_softmax_xent_cuda,
    )

    return [
        ("06_training_memory.ipynb", "softmax_cross_entropy", check_softmax_cross_entropy),
        ("06_training_memory.ipynb", "layer_norm_backward", check_layer_norm_backward),
        ("06_training_memory.ipynb", "loss_scaler_step", check_loss_scaler_step),
        ("07_collectives.ipynb", "ring_allreduce", check_ring_allreduce),
        ("08_parallelism.ipynb", "tp_mlp", check_tp_mlp),
        ("08_parallelism.ipynb", "one_f_one_b", check_one_f_one_b),
        ("08_parallelism.ipynb", "ddp_schedule", check_ddp_schedule),
        ("09_fault_tolerance.ipynb", "write_checkpoint", check_crash_safe_writer),
        ("12_capstone.ipynb", "attention_backward", check_attention_backward),
        ("12_capstone.ipynb", "average_gradients", check_average_gradients),
        ("10_peft.ipynb", "lora_forward", check_lora_forward),
        ("10_peft.ipynb", "lora_backward", check_lora_backward),
        ("11_moe.ipynb", "route_with_capacity", check_route_with_capacity),
        ("11_moe.ipynb", "top_k_gate", check_top_k_gate),
        ("11_moe.ipynb", "aux_loss", check_aux_loss),
        ("11_moe.ipynb", "ep_dispatch", check_ep_dispatch),
    ] + ([("06_training_memory.ipynb", "softmax_xent_cuda", check_softmax_xent_cuda)] if backend.on_gpu else [])


@pytest.fixture
def keep_every_piece(learner, capsys):
    """A call that passes every piece's check with the learner's solved cell, which keeps them all."""

    def keep() -> None:
        exercises = solved_exercises()
        for notebook, function, check in exercises:
            check(learner.solved(notebook, function))
        assert capsys.readouterr().out.count("✓") == len(exercises)

    return keep
