"""Does the interpreter run any graph node by node, and refuse inputs of the wrong shape?"""

import pytest
from operators.programs import assert_close, chain, randn

from mlsys_lab.operators import RunStats, run_eager, trace


def test_eager_runs_one_kernel_per_operator():
    graph = trace(chain, (4, 8), (4, 8), (8,))
    a, b, c = randn(4, 8), randn(4, 8), randn(8)
    stats: list[RunStats] = []
    assert_close(run_eager(graph, a, b, c, stats=stats), chain(a, b, c), rtol=1e-6)
    assert len(stats) == 1 and stats[0].n_kernels == graph.n_kernels == 5


def test_run_rejects_bad_shapes():
    graph = trace(chain, (4, 8), (4, 8), (8,))
    with pytest.raises(ValueError, match=r"input a must have shape \(4, 8\)"):
        run_eager(graph, randn(5, 8), randn(4, 8), randn(8))
