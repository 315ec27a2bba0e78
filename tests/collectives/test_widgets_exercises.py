"""Do lesson 07's explorers and exercise checks behave, and do the checks catch wrong answers?"""

import numpy as np
import pytest

from mlsys_lab.collectives import simulate
from mlsys_lab.exercises import collectives as checks
from mlsys_lab.widgets import collectives as explorers


def test_ring_explorer_names_a_bad_round():
    ex = explorers.RingAllReduceExplorer()
    ex.set(n_ranks=3, step=9)
    assert ex.error == "step must be an integer between 0 and 4; got 9"
    ex.set(step=4)
    assert ex.error is None and ex.readout["sent per rank so far (1 MiB vector)"] == "1365 KiB"


def test_alpha_beta_explorer_reports_crossovers():
    ex = explorers.AlphaBetaExplorer()
    ex.set(n_ranks=48, alpha_us=10.0, bandwidth_gb_s=50.0)
    assert ex.error is None
    assert ex.readout["best at 4 KiB"] in ("tree", "halving_doubling")
    assert ex.readout["best at 1 GiB"] == "ring"


def test_topology_explorer_shows_bisection_and_rejects_bad_sizes():
    ex = explorers.TopologyExplorer()
    ex.set(topology="ring", n_nodes=16, link_gb_s=50.0)
    assert ex.readout["bisection bandwidth"] == "100 GB/s"
    ex.set(topology="fat_tree", n_nodes=12)
    assert "power of two" in ex.error


def test_bucket_explorer_overlap_beats_no_overlap():
    ex = explorers.BucketOverlapExplorer()
    with_overlap = ex.set(bucket_mib=100.0, overlap=True).step_seconds
    without = ex.set(overlap=False).step_seconds
    assert with_overlap < without


def _reference_ring(buffers, net):
    p = len(buffers)
    work = [b.copy() for b in buffers]
    views = [np.array_split(w, p) for w in work]
    for step in range(p - 1):
        messages = [(r, (r + 1) % p, views[r][(r - step) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            views[dst][(src - step) % p] += data
    for step in range(p - 1):
        messages = [(r, (r + 1) % p, views[r][(r + 1 - step) % p]) for r in range(p)]
        for (src, dst, _), data in zip(messages, net.exchange(messages), strict=True):
            views[dst][(src + 1 - step) % p][...] = data
    return work


def _naive(buffers, net):  # right answer, wrong traffic: gathers everything on rank 0
    result = simulate.naive_allreduce(buffers)
    for src in range(1, len(buffers)):
        net.exchange([(src, 0, buffers[src])])
    return result.outputs


def _todo(*_args):
    raise NotImplementedError()


@pytest.mark.parametrize(
    ("check", "fn", "verdict"),
    [
        (checks.check_ring_allreduce, _reference_ring, "✓ ring_allreduce: 14/14 cases"),
        (
            checks.check_ring_allreduce,
            lambda b, net: [np.sum(b, axis=0)] * len(b),
            "✗ ring_allreduce: case 1",
        ),
        (checks.check_ring_allreduce, _naive, "✗ ring_allreduce: case 1"),
        (checks.check_ring_allreduce, _todo, "… ring_allreduce: not attempted yet"),
        (checks.check_hierarchical_allreduce, lambda b, net, g: _reference_ring(b, net),
         "✗ hierarchical_allreduce: case 1 (2 nodes x 4 GPUs, n=16): rank 0 (node 0, GPU 0) sent 224 bytes"),
        (checks.check_hierarchical_allreduce, _todo, "… hierarchical_allreduce: not attempted yet"),
        (checks.check_allreduce_time, explorers.cost.allreduce_time, "✓ allreduce_time: 34/34 cases"),
        (
            checks.check_allreduce_time,
            lambda a, n, p, al, be: 2 * (p - 1) * (al + n / p * be),
            "✗ allreduce_time",
        ),
        (checks.check_hierarchical_alltoall, lambda b, net, g: [np.stack([x[j] for x in b]) for j in range(len(b))],
         "✗ hierarchical_alltoall: case 1 (2 nodes x 2 GPUs, m=1 (the example)): rank 0 (node 0, GPU 0) sent 0 bytes"),
        (checks.check_hierarchical_alltoall, _todo, "… hierarchical_alltoall: not attempted yet"),
    ],
)
def test_checks_pass_the_reference_and_catch_mistakes(capsys, check, fn, verdict):
    check(fn)
    assert capsys.readouterr().out.startswith(verdict)
