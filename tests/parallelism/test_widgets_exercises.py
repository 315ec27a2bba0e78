"""Do the lesson's explorers and exercise checks behave, headless?"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mlsys_lab.exercises import evaluate
from mlsys_lab.exercises import parallelism as ex
from mlsys_lab.widgets.parallelism import (
    DDPOverlapExplorer,
    PipelineExplorer,
    PlannerExplorer,
    ZeroMemoryExplorer,
)


def test_pipeline_explorer_matches_formula_and_reports_bad_input():
    explorer = PipelineExplorer()
    explorer.set(schedule="gpipe", n_stages=4, n_microbatches=8)
    assert explorer.error is None
    assert explorer.readout["bubble, simulated"] == explorer.readout["bubble, formula"] == "27.27%"
    explorer.set(schedule="interleaved", n_chunks=2, n_microbatches=6)
    assert "multiple of n_stages=4" in explorer.error
    explorer.set(n_microbatches=8)
    assert explorer.error is None and explorer.readout["bubble, formula"] == "15.79%"


def test_pipeline_explorer_draws_zb_h1_at_the_papers_bubble():
    explorer = PipelineExplorer()
    explorer.set(schedule="zb-h1", n_stages=4, n_microbatches=8)
    assert explorer.error is None
    assert explorer.readout["bubble, simulated"] == explorer.readout["bubble, formula"] == "11.11%"  # 3 / 27
    assert explorer.readout["total time"] == "27"


def test_zero_explorer_shows_paper_figures():
    explorer = ZeroMemoryExplorer()
    explorer.set(n_params=7.5e9, n_gpus=64, gpu_memory_gb=80)
    assert explorer.readout["stage 1"].startswith("31.4 GB (3.82×")
    assert explorer.readout["stage 3"].startswith("1.88 GB (64×")
    assert "1.5× DDP" in explorer.readout["stage 3"]
    explorer.set(offload_optimizer=True)  # 12Ψ of Adam states leave the GPU: DDP keeps 4Ψ = 30 GB
    assert explorer.readout["stage 0"].startswith("30 GB (4×")
    assert explorer.readout["on CPU (offload)"] == "1.41 GB at stage 3"


def test_planner_and_ddp_explorers_run_and_fail_politely():
    planner = PlannerExplorer()
    assert planner.error is None and "TP" in planner.readout["best plan"]
    planner.set(n_nodes=1)
    assert "no plan fits" in planner.error
    ddp = DDPOverlapExplorer()
    hidden = float(ddp.readout["exposed comm"].split()[0])
    ddp.set(overlap=False)
    assert float(ddp.readout["exposed comm"].split()[0]) > hidden


def _catalogues() -> list:
    """The wrong-answer catalogues of ``test_exercise_catalogue.py`` (loaded by path: not a package)."""
    spec = importlib.util.spec_from_file_location("parallelism_catalogue",
                                                  Path(__file__).with_name("test_exercise_catalogue.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CATALOGUES


CATALOGUES = _catalogues()


@pytest.mark.parametrize("catalogue", CATALOGUES, ids=[c.name for c in CATALOGUES])
def test_checks_pass_right_answers_and_catch_wrong_ones(catalogue, capsys):
    """Does each check accept a solution, reject a plausible mistake, and say 'not attempted'?"""
    name, good, bad = catalogue.name, catalogue.reference, next(iter(catalogue.wrong.values()))
    checker = getattr(ex, f"check_{name}")
    checker(good)
    checker(bad)

    def todo(*args):
        raise NotImplementedError()

    checker(todo)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"✓ {name}:") and lines[1].startswith(f"✗ {name}:")
    assert lines[2] == f"… {name}: not attempted yet"


def test_evaluate_reports_case_counts():
    verdict = evaluate("zero_memory", CATALOGUES[0].reference, [])
    assert verdict.passed
