"""Do the tensor-core tables read the record right, and does the bank model give the hand-worked passes?"""

import pytest

from mlsys_lab import records
from mlsys_lab.hardware import H200
from mlsys_lab.memory_hierarchy import tensor_cores as tc

RECORD = records.load("tensor_cores_h200")


def test_bank_passes_match_the_hand_worked_layouts():
    """Rows of 64 B put rows r and r+2 on the same banks (word 16r): 8 rows -> 4 passes. Rows padded to 80 B
    start at word 20r (banks 0, 20, 8, 28, 16, 4, 24, 12): 1 pass. 128-byte rows with chunk c ^ r: 1 pass."""
    assert tc.gemm_bank_passes("mma_ldmatrix")["ldmatrix"] == 4
    assert tc.gemm_bank_passes("wmma")["ldmatrix"] == 1
    assert tc.gemm_bank_passes("pipeline")["ldmatrix"] == 1
    assert tc.gemm_bank_passes("wgmma")["ldmatrix"] == 1


def test_ladder_rows_are_the_recorded_figures_in_order():
    rows = tc.gemm_ladder(RECORD, "8192")
    assert [r.name for r in rows] == list(tc.GEMM_STEPS)
    for row in rows:
        measured = RECORD["gemm_timing"]["8192"]["steps"][row.name]
        assert row.flop_per_s == measured["flop_per_s"]
        assert row.fraction_of_best == pytest.approx(
            measured["flop_per_s"] / RECORD["gemm_timing"]["8192"]["cublas_bf16"]["best_flop_per_s"])
        assert row.bank_passes == RECORD["gemm_resources"][row.name]["bank_passes_ldmatrix_phase"]


def test_attention_rows_and_fractions():
    rows = tc.attention_rows(RECORD, "4096")
    assert [r.name for r in rows] == list(tc.ATTENTION_VARIANTS)
    assert all(r.bank_passes == 1 for r in rows)  # swizzled K/V tiles
    by_length = tc.attention_fraction_by_length(RECORD, "d128_full")
    assert sorted(by_length) == [1024, 2048, 4096, 8192, 16384]
    timing = RECORD["attention_timing"]["d128_full"]["4096"]
    assert by_length[4096] == pytest.approx(timing["flash"]["median_s"] ** -1 / timing["sdpa_flash"]["median_s"] ** -1)


def test_ridge_and_intensity_worked_examples():
    assert H200.ridge_point("bf16") == pytest.approx(989.5e12 / 4.8e12)  # ~206 FLOP/B
    assert tc.gemm_intensity(8192) == pytest.approx(2 * 8192**3 / (3 * 8192**2 * 2))  # 2731 FLOP/B


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="size"):
        tc.gemm_ladder(RECORD, "1000")
    with pytest.raises(ValueError, match="step"):
        tc.gemm_bank_passes("naive")
    with pytest.raises(TypeError, match="record"):
        tc.gemm_ladder("tensor_cores_h200")


def test_attention_intensity_hand_worked():
    """Per head: 4 N^2 d FLOP over 4 N d x 2 bytes = N / 2 FLOP/B; causal does half the FLOP."""
    assert tc.attention_intensity(4096, 128, causal=False) == pytest.approx(2048)
    assert tc.attention_intensity(4096, 64, causal=True) == pytest.approx(1024)


def test_roofline_dots_lie_under_the_bf16_roof():
    roof = H200.peak("bf16")
    dots = tc.roofline_dots(RECORD)
    assert {d.name for d in dots if d.vendor} == {"cuBLAS BF16", "SDPA flash, full", "SDPA flash, causal"}
    for dot in dots:
        assert dot.intensity > H200.ridge_point("bf16")  # all compute-bound on the BF16 roofline
        assert 0 < dot.flop_per_s < roof
