"""Do the lesson's explorers and exercise checks behave, headless?"""

from __future__ import annotations

import pytest

from mlsys_lab.exercises import evaluate
from mlsys_lab.exercises import parallelism as ex
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import mlp
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


def _zero_memory(n_params, n_gpus, stage):
    return n_params * (2 / (n_gpus if stage >= 3 else 1) + 2 / (n_gpus if stage >= 2 else 1)
                       + 12 / (n_gpus if stage >= 1 else 1))


def _microbatches(n_stages, max_bubble, schedule, n_chunks):
    step = n_stages if schedule == "interleaved" else 1
    m = step
    while (n_stages - 1) / (n_chunks * m + n_stages - 1) > max_bubble:
        m += step
    return m


def _tp_mlp(x, w1, w2, n_ranks, log):
    w1s, w2s = comm.partition(w1, n_ranks, axis=1), comm.partition(w2, n_ranks, axis=0)
    return comm.all_reduce([mlp(x, w1s[r], w2s[r])[0] for r in range(n_ranks)], log)


def _tp_mlp_gathering(x, w1, w2, n_ranks, log):
    comm.all_gather(comm.partition(w1, n_ranks, axis=1), axis=1, log=log)  # wastes the budget
    return _tp_mlp(x, w1, w2, n_ranks, log)


@pytest.mark.parametrize("name,good,bad", [
    ("zero_memory", _zero_memory, lambda n, g, s: 16 * n / g),
    ("microbatches_for_bubble", _microbatches, lambda *a: _microbatches(*a) + 1),
    ("tp_mlp", _tp_mlp, _tp_mlp_gathering),
])
def test_checks_pass_right_answers_and_catch_wrong_ones(name, good, bad, capsys):
    """Does each check accept a solution, reject a plausible mistake, and say 'not attempted'?"""
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
    verdict = evaluate("zero_memory", _zero_memory, [])
    assert verdict.passed
