"""Does the roofline explorer move the point across the ridge, and show a bad dtype in place?"""

from __future__ import annotations

import numpy as np
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


def test_an_error_clears_the_readout():
    explorer = RooflineExplorer()
    assert explorer.readout
    explorer.set(hardware="Generic 8-core AVX2 CPU", dtype="bf16")
    assert explorer.error and explorer.readout == {} and explorer.result is None


def test_the_batch_slider_lands_on_the_crossing():
    # d = 4096 bf16 on the H200 preset: 2 b d / (2 (2 b + d)) >= 206.15 first at b = 230 (229: 205.9 FLOP/B)
    explorer = RooflineExplorer()
    explorer.set(operator="linear layer (batch x d)", dtype="bf16", m=229, n=4096)
    assert explorer.readout["bound"] == "memory-bound" and explorer.readout["sizes (m, n, k)"].startswith("229,")
    explorer.set(m=230)
    assert explorer.readout["bound"] == "compute-bound" and explorer.readout["sizes (m, n, k)"].startswith("230,")


def test_tensor_core_roofline_draws_every_dot_under_the_roof():
    import matplotlib.pyplot as plt

    from mlsys_lab import records
    from mlsys_lab.hardware import H200
    from mlsys_lab.memory_hierarchy import tensor_cores
    from mlsys_lab.widgets.roofline import plot_tensor_core_roofline

    dots = tensor_cores.roofline_dots(records.load("tensor_cores_h200"))
    fig, ax = plt.subplots()
    plot_tensor_core_roofline(ax, H200, dots, "test")
    assert len(ax.texts) == len(dots)
    assert max(ax.lines[0].get_ydata()) == H200.peak("bf16")
    plt.close(fig)


def test_the_size_slider_can_land_on_every_batch_up_to_400():
    """Can the log slider's steps reach each integer batch (the bf16 crossing at 230 among them)?"""
    from mlsys_lab.widgets.roofline import _size_slider

    slider = _size_slider("m", 4096)
    positions = slider.min + slider.step * np.arange(round((slider.max - slider.min) / slider.step) + 1)
    reachable = set(np.round(slider.base ** positions).astype(int).tolist())
    assert set(range(1, 401)) <= reachable and 230 in reachable
