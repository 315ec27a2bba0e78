"""Do lesson 01's checks accept the reference and reject wrong answers?"""

from mlsys_lab.exercises.operators import (
    check_assign_offsets,
    check_can_fuse,
    check_dynamic_schedule,
    check_fuse_graph,
    check_matmul_intensity,
    check_replace_silu,
    reference_can_fuse,
    reference_fuse_graph,
    reference_replace_silu,
)
from mlsys_lab.operators.memory_plan import plan_greedy_by_size
from mlsys_lab.operators.schedule import list_schedule


def verdict(capsys, check, fn):
    check(fn)
    return capsys.readouterr().out.strip()


def test_checks_accept_the_reference_and_reject_wrong_answers(capsys):
    assert (
        verdict(
            capsys, check_matmul_intensity, lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n + m * n) * b)
        )
        == "✓ matmul_intensity: 14/14 cases"  # 4 fixed (the examples, 1×1×1, m, n, k all different) + 10 random
    )
    assert verdict(
        capsys, check_matmul_intensity, lambda m, n, k, b: m * n * k / ((m * k + k * n + m * n) * b)
    ).startswith("✗ matmul_intensity: case 1")
    assert verdict(capsys, check_can_fuse, reference_can_fuse) == "✓ can_fuse: 40/40 cases"

    def ignores_readers(g, p, c):  # forgets that a value read twice must stay in memory
        return g.node(p).op not in ("matmul", "sum", "input") and g.node(c).op not in ("matmul", "sum")

    assert verdict(capsys, check_can_fuse, ignores_readers).startswith("✗ can_fuse")
    assert (
        verdict(capsys, check_assign_offsets, lambda ivs: plan_greedy_by_size(ivs, alignment=1))
        == "✓ assign_offsets: 17/17 cases"  # 6 fixed tables + 8 random tables + 3 random programs
    )
    assert "live together" in verdict(capsys, check_assign_offsets, lambda ivs: {iv.name: 0 for iv in ivs})

    def end_to_end(ivs):
        offsets, cursor = {}, 0
        for iv in ivs:
            offsets[iv.name], cursor = cursor, cursor + iv.n_bytes
        return offsets

    assert "over the budget" in verdict(capsys, check_assign_offsets, end_to_end)

    def todo(*args):
        raise NotImplementedError()

    assert verdict(capsys, check_can_fuse, todo) == "… can_fuse: not attempted yet"


def test_graph_and_schedule_checks_name_what_is_wrong(capsys):
    assert verdict(capsys, check_fuse_graph, reference_fuse_graph) == "✓ fuse_graph: 22/22 cases"  # 8 boundary + 14
    # no fusion at all: valid graph, but more kernels and bytes than the lesson's rule, and the line says so
    line = verdict(capsys, check_fuse_graph, lambda nodes, outputs: nodes)
    assert line.startswith("✗ fuse_graph: case 1 (chain, ") and "the lesson's rule gets 1 kernels" in line
    assert verdict(capsys, check_replace_silu, reference_replace_silu) == "✓ replace_silu: 15/15 cases"  # 3 + 12
    line = verdict(capsys, check_replace_silu, lambda nodes, outputs: nodes)
    assert line.startswith("✗ replace_silu: case 1 (both orders") and "2 replaceable x * sigmoid(x)" in line
    assert verdict(capsys, check_dynamic_schedule, list_schedule) == "✓ dynamic_schedule: 16/16 cases"  # 6 + 10

    def one_worker(durations, deps, n_workers):  # back to back on worker 0, in index order
        rows, now = [], 0.0
        for task, d in enumerate(durations):
            rows.append((task, 0, now, now + d))
            now += d
        return rows

    line = verdict(capsys, check_dynamic_schedule, one_worker)
    assert line.startswith("✗ dynamic_schedule: case 1 (the example")
    assert "expected [(0, 0, 0.0, 3.0), (1, 1, 0.0, 2.0)" in line

    def todo(*args):
        raise NotImplementedError()

    for check, name in ((check_fuse_graph, "fuse_graph"), (check_replace_silu, "replace_silu"),
                        (check_dynamic_schedule, "dynamic_schedule")):
        assert verdict(capsys, check, todo) == f"… {name}: not attempted yet"
