"""00 start here: how long does it take to move a tensor, on each data path of a machine?"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.hardware import PRESETS, Hardware
from mlsys_lab.start_here import fits_in_memory, tensor_bytes, transfer_times
from mlsys_lab.units import BYTES_PER_DTYPE, format_seconds
from mlsys_lab.widgets.base import Explorer, log_slider


class TransferExplorer(Explorer):
    """Pick a tensor size, a dtype and a machine: see the time to stream it over each data path."""

    figsize = (6.0, 3.0)

    def make_controls(self):
        return {
            "n_params": log_slider("parameters", 7e9, 1e6, 1e12),
            "dtype": widgets.Dropdown(options=list(BYTES_PER_DTYPE), value="bf16", description="dtype"),
            "hardware": widgets.Dropdown(options=list(PRESETS), value="NVIDIA H200 SXM", description="machine"),
        }

    def compute(self, n_params, dtype, hardware):
        n_bytes = tensor_bytes((int(round(n_params)),), dtype)
        hw = PRESETS[hardware]
        return {"n_bytes": n_bytes, "hw": hw, "times": transfer_times(n_bytes, hw), "fits": fits_in_memory(n_bytes, hw)}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.bars = None

    def redraw(self, result):
        ax = self.ax
        ax.clear()  # the number of links changes with the machine, so the bars are rebuilt
        names, seconds = list(result["times"]), np.array(list(result["times"].values()))
        ax.barh(names, seconds, color="#4c72b0")
        ax.set_xscale("log")
        ax.set_xlabel("seconds to move the tensor once")
        ax.invert_yaxis()
        ax.set_title(f"{result['n_bytes'] / 1e9:.4g} GB on {result['hw'].name}", fontsize=10)

    def readout_of(self, result):
        hw = result["hw"]
        rows = {"size": f"{result['n_bytes'] / 1e9:.4g} GB",
                f"fits in {hw.memory_bytes / 1e9:.0f} GB memory": "yes" if result["fits"] else "no"}
        rows.update({k: format_seconds(v) for k, v in result["times"].items()})
        return rows


def plot_machine_ceilings(ax_flops, ax_bandwidth, machines: list[Hardware], colors: list[str]) -> None:
    """Two bar charts, one bar per machine: fp32 peak FLOP/s and memory bandwidth, both on log axes."""
    names = [hw.name for hw in machines]
    ax_flops.barh(names, [hw.peak("fp32") for hw in machines], color=colors)
    ax_flops.set_xscale("log")
    ax_flops.set_xlabel("fp32 FLOP/s")
    ax_flops.invert_yaxis()
    ax_bandwidth.barh(names, [hw.memory_bandwidth_bytes_per_s for hw in machines], color=colors)
    ax_bandwidth.set_xscale("log")
    ax_bandwidth.set_xlabel("memory bandwidth, bytes/s")
    ax_bandwidth.invert_yaxis()
    ax_bandwidth.set_yticklabels([])
