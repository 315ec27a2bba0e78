"""Does the roofline explorer move the point across the ridge, and show a bad dtype in place?"""

from __future__ import annotations

import pytest

from mlsys_lab.hardware import H200
from mlsys_lab.widgets.roofline import RooflineExplorer


def test_explorer_moves_the_point_across_the_ridge():
    explorer = RooflineExplorer()
    assert explorer.error is None and explorer.readout["bound"] == "compute-bound"  # 4096^3 fp32 matmul
    explorer.set(operator="linear layer (batch x d)", dtype="bf16", m=16, n=4096)
    assert explorer.readout["bound"] == "memory-bound"
    explorer.set(m=1024)
    assert explorer.readout["bound"] == "compute-bound"
    assert explorer.result.attainable_flops == pytest.approx(H200.peak("bf16"))


def test_explorer_shows_a_bad_dtype_in_place():
    explorer = RooflineExplorer()
    explorer.set(hardware="Generic 8-core AVX2 CPU", dtype="bf16")
    assert "dtype must be one of fp64, fp32" in explorer.error
    explorer.set(dtype="fp32")
    assert explorer.error is None
