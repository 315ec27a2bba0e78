"""Do lesson 01's checks accept the reference and reject wrong answers?"""

from mlsys_lab.exercises.operators import (
    check_assign_offsets,
    check_can_fuse,
    check_matmul_intensity,
    reference_can_fuse,
)
from mlsys_lab.operators.memory_plan import plan_greedy_by_size


def verdict(capsys, check, fn):
    check(fn)
    return capsys.readouterr().out.strip()


def test_checks_accept_the_reference_and_reject_wrong_answers(capsys):
    assert (
        verdict(
            capsys, check_matmul_intensity, lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n + m * n) * b)
        )
        == "✓ matmul_intensity: 12/12 cases"
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
        == "✓ assign_offsets: 14/14 cases"
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
