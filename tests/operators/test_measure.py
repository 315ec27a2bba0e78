"""Do the lesson's measurements check equality and report the bytes each variant moves?"""

import pytest

from mlsys_lab.operators import measure


def test_measurements_check_equality_and_report_bytes():
    fusion = measure.measure_fusion(4096, repeat=2)
    assert fusion["max_relative_error"] < 1e-5 and fusion["eager_bytes"] / fusion[
        "fused_bytes"
    ] == pytest.approx((11 * 4096 + 1024) / (3 * 4096 + 1024))
    dispatch = measure.measure_dispatch(4, 64, repeat=2)
    assert dispatch["max_relative_error"] < 1e-5
    attention = measure.measure_attention(16, heads=2, head_dim=8, repeat=1)
    assert attention["max_relative_error"] < 1e-5 and attention["unfused_kernels"] == 6
