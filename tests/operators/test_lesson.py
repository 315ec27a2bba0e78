"""Lesson 01's explorers, exercise checks, schedule model and measurement helpers."""

import pytest

from mlsys_lab.exercises.operators import (
    check_assign_offsets,
    check_can_fuse,
    check_matmul_intensity,
    reference_can_fuse,
)
from mlsys_lab.operators import measure
from mlsys_lab.operators.memory_plan import plan_greedy_by_size
from mlsys_lab.operators.schedule import pipeline_times
from mlsys_lab.widgets.operators import OperatorExplorer, PassExplorer


def test_operator_explorer_reads_out_the_library_numbers():
    explorer = OperatorExplorer()
    explorer.set(op_name="matmul", size=1024, dtype="fp32", hardware="NVIDIA H200 SXM")
    assert explorer.error is None
    assert explorer.readout["intensity"] == "171 FLOP/B" and explorer.readout["bound"] == "compute-bound"
    explorer.set(op_name="relu")
    assert explorer.readout["class"] == "elementwise" and explorer.readout["bound"] == "memory-bound"


def test_operator_explorer_shows_a_bad_dtype_in_place():
    explorer = OperatorExplorer()
    explorer.set(dtype="bf16", hardware="Generic 8-core AVX2 CPU")
    assert explorer.error == "dtype must be one of fp64, fp32 on Generic 8-core AVX2 CPU; got 'bf16'"
    explorer.set(dtype="fp32")
    assert explorer.error is None


def test_pass_explorer_counts_kernels_with_passes_on_and_off():
    explorer = PassExplorer()
    assert explorer.readout["before: kernels"] == "6" and explorer.readout["after: kernels"] == "1"
    explorer.set(program="elementwise chain", fuse_elementwise=False)
    assert explorer.readout["after: kernels"] == "5"
    explorer.set(fuse_elementwise=True)
    assert explorer.readout["after: kernels"] == "1"


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


def test_pipeline_is_paced_by_the_slowest_stage():
    times = pipeline_times([4.0, 1.0, 1.0], n_items=1000)
    assert times.serial_seconds == 6000.0
    assert times.pipelined_seconds == 6.0 + 999 * 4.0
    assert times.utilisation[0] == pytest.approx(4000 / 4002)
    with pytest.raises(ValueError, match="stage_seconds"):
        pipeline_times([], 3)


def test_measurements_check_equality_and_report_bytes():
    fusion = measure.measure_fusion(4096, repeat=2)
    assert fusion["max_relative_error"] < 1e-5 and fusion["eager_bytes"] / fusion[
        "fused_bytes"
    ] == pytest.approx((11 * 4096 + 1024) / (3 * 4096 + 1024))
    dispatch = measure.measure_dispatch(4, 64, repeat=2)
    assert dispatch["max_relative_error"] < 1e-5
    attention = measure.measure_attention(16, heads=2, head_dim=8, repeat=1)
    assert attention["max_relative_error"] < 1e-5 and attention["unfused_kernels"] == 6
