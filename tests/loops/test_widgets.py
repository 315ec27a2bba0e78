"""Does the loop-order explorer show the model and the measurement, and do the drawing helpers only draw?"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from mlsys_lab import records
from mlsys_lab.loops import single
from mlsys_lab.widgets.loops import (
    LoopOrderExplorer,
    draw_side_by_side,
    plot_misses_vs_time,
    plot_recorded_ladders,
)


def test_explorer_reads_out_the_model_and_the_measured_time():
    explorer = LoopOrderExplorer()
    explorer.set(order="ikj", tile=16, n=64)
    assert explorer.error is None
    assert explorer.readout["model: L1 misses / iteration"] == f"{explorer.result['misses']:.3f}"
    assert explorer.readout["speed-up over ijk untiled"].endswith("x")


def test_drawing_helpers():
    html = draw_side_by_side(single.sum_naive, single.sum_unrolled, ("one", "eight"))
    assert "def sum_naive" in html.data and "def sum_unrolled" in html.data and "<b>eight</b>" in html.data
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3)
    plot_recorded_ladders(ax1, ax2, records.load("loops_cpu"), records.load("loops_gpu"))
    assert len(ax1.patches) == 8 and len(ax2.patches) == 8
    sweep = {"order": np.array(["ijk", "ikj"]), "misses": np.array([1.0, 0.2]), "seconds": np.array([2e-3, 1e-3])}
    plot_misses_vs_time(ax3, sweep)
    assert len(ax3.collections) == 2
    plt.close(fig)
