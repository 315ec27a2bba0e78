"""Do lesson 04's Hopper tables recompute every ratio from the recorded times (a synthetic record, by hand)?"""

from __future__ import annotations

import pytest

from mlsys_lab import records
from mlsys_lab.memory_hierarchy import hopper


def timing(seconds: float, flop: float) -> dict:
    return {"median_s": seconds, "flop_per_s": flop / seconds}


def synthetic() -> dict:
    flop = 1e12
    row = {"batch": 4, "heads": 16, "hopper_default": timing(2.0, flop), "hopper_no_pingpong": timing(2.5, flop),
           "fa2_course": timing(4.0, flop), "sdpa_flash": timing(3.0, flop), "sdpa_cudnn": timing(1.6, flop)}
    return {"device": "NVIDIA H200", "date": "2026-12-02",
            "attention": {"d128_full_4096": row, "d64_causal_16384": {**row, "sdpa_cudnn": timing(1.0, flop)}},
            "attention_backward": {"d128_causal_4096": {"hopper_backward": timing(4.0, 2.5 * flop),
                                                        "sdpa_flash": timing(8.0, 2.5 * flop),
                                                        "sdpa_cudnn": timing(3.0, 2.5 * flop)}},
            "fp8_8192": {"size": 8192, "bn256": timing(1.0, 2e15), "course_default": timing(1.0, 2e15),
                         "scaled_mm": {"per_tensor": timing(0.5, 2e15), "rowwise": {"error": "refused"}}},
            "fp8_check_bn256": {"cases": [{"max_error_over_bound": 0.25}, {"max_error_over_bound": 0.5}]},
            "fp8_check_bn128": {"cases": [{"max_error_over_bound": 0.125}]}}


def test_attention_rows_put_d128_first_and_divide_the_two_times():
    rows = hopper.attention_vs_cudnn(synthetic())
    assert [(r.head_dim, r.causal, r.seq) for r in rows] == [(128, False, 4096), (64, True, 16384)]
    assert rows[0].of_cudnn == pytest.approx(1.6 / 2.0)  # cuDNN's time over the course kernel's
    assert rows[1].of_cudnn == pytest.approx(0.5)
    assert rows[0].tflops["fa2_course"] == pytest.approx(0.25)
    assert rows[0].label == "d 128 full    4096"


def test_backward_rows_divide_cudnns_backward_time_by_ours():
    (row,) = hopper.attention_vs_cudnn(synthetic(), "backward")
    assert (row.head_dim, row.causal, row.seq) == (128, True, 4096)
    assert row.of_cudnn == pytest.approx(3.0 / 4.0)
    assert row.tflops == pytest.approx({"hopper_backward": 0.625, "sdpa_flash": 0.3125, "sdpa_cudnn": 2.5 / 3})
    with pytest.raises(ValueError, match="direction"):
        hopper.attention_vs_cudnn(synthetic(), "sideways")


def test_target_ratios_name_each_target_once_with_its_anchor():
    ratios = hopper.target_ratios(synthetic())
    assert ratios == [("forward, full 4096", pytest.approx(0.8), 0.9),
                      ("backward, causal 4096", pytest.approx(0.75), 0.6), ("FP8 GEMM 8192³", 0.5, 0.7)]
    one_run = [what for what, _, _ in hopper.target_ratios(records.load(hopper.RECORD))]
    assert one_run == [f"{direction}, {mask} {seq}" for direction in ("forward", "backward")
                       for mask in ("full", "causal") for seq in (4096, 16384)] + ["FP8 GEMM 8192³"]


def test_attention_steps_name_each_variant_once():
    steps = hopper.attention_steps(synthetic())
    assert steps == pytest.approx({"default": 0.5, "no_pingpong": 0.4, "fa2_course": 0.25})
    with pytest.raises(ValueError, match="key"):
        hopper.attention_steps(synthetic(), "d96_full_4096")


def test_fp8_rows_are_fractions_of_scaled_mm_and_skip_what_failed():
    rows = hopper.fp8_rows(synthetic())
    assert rows == [("bn256", pytest.approx(2000.0), 0.5), ("course_default", pytest.approx(2000.0), 0.5),
                    ("torch._scaled_mm per_tensor", pytest.approx(4000.0), 1.0)]
    assert hopper.fp8_bound_use(synthetic()) == 0.5


def test_the_recorded_run_reads_and_holds_what_the_lesson_quotes():
    run = records.load(hopper.RECORD)
    rows = hopper.attention_vs_cudnn(run)
    assert {(r.head_dim, r.causal, r.seq) for r in rows} >= {(128, c, s) for c in (False, True) for s in (4096, 16384)}
    assert all(0.5 < r.of_cudnn < 1.2 for r in rows)
    backward_run = records.load(hopper.BACKWARD_RECORD)
    assert backward_run["device"].startswith("NVIDIA H")
    backward = hopper.attention_vs_cudnn(backward_run, "backward")
    assert {(r.head_dim, r.causal, r.seq) for r in backward} >= {(128, c, 4096) for c in (False, True)}
    assert all(0.5 < r.of_cudnn < 1.2 for r in backward)
    assert all(check["passed"] for check in backward_run["backward_checks"].values())
    assert hopper.fp8_bound_use(run) <= 1.0


def test_swizzle_spreads_a_phase_of_128_byte_rows_over_every_bank():
    # 8 rows of 128 bytes (32 words) start on the same bank: reading one 16-byte chunk of each is 8 passes; XOR-ing
    # the chunk with row % 8 puts the 8 rows' chunks on 8 different groups of 4 banks: one pass.
    assert hopper.operand_bank_passes() == {"swizzled": 1, "unswizzled": 8}
