"""04 memory hierarchy: what one warp's addresses cost, in global-memory sectors or shared-memory passes."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.memory_hierarchy import simt
from mlsys_lab.memory_hierarchy.simt import SPACES, warp_access
from mlsys_lab.widgets.base import Explorer, slider


class WarpAccessExplorer(Explorer):
    """Stride and offset of ``x[offset + lane * stride]``: see each lane's sector or bank and the cost."""

    figsize = (6.4, 3.4)

    def make_controls(self):
        return {
            "space": widgets.Dropdown(options=list(SPACES), value=SPACES[0], description="memory"),
            "stride": slider("stride (elements)", 1, 0, 33),
            "offset": slider("offset (elements)", 0, 0, 31),
            "element_bytes": widgets.Dropdown(options=[4, 8, 16], value=4, description="element bytes"),
        }

    def compute(self, space, stride, offset, element_bytes):
        return warp_access(space, stride, offset, element_bytes)

    def draw(self, figure):
        self.ax_lanes, self.ax_count = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        self.scatter = self.ax_lanes.scatter(np.arange(32), np.zeros(32), s=18, color="#4c72b0")
        self.ax_lanes.set_xlabel("lane")
        self.ax_lanes.set_xlim(-1, 32)
        self.bars = self.ax_count.bar(np.arange(32), np.zeros(32), color="#dd8452", width=0.9)
        self.ax_count.set_xlim(-1, 32)
        self.ax_count.set_ylabel("lanes")

    def redraw(self, result):
        shared = result.space == SPACES[1]
        self.scatter.set_offsets(np.column_stack([np.arange(32), result.slots]))
        top = 32 if shared else max(int(result.slots.max()) + 1, 4)
        self.ax_lanes.set_ylim(-1, top)
        self.ax_lanes.set_ylabel("bank" if shared else "sector (from the first)")
        counts = np.bincount(np.minimum(result.slots, 31), minlength=32)[:32]
        for bar, count in zip(self.bars, counts, strict=True):
            bar.set_height(count)
        self.ax_count.set_ylim(0, max(int(counts.max()), 1) * 1.15)
        self.ax_count.set_xlabel("bank" if shared else "sector (first 32)")
        what = "passes" if shared else "sectors"
        self.ax_lanes.set_title(f"{result.cost} {what} ({result.efficiency:.0%} efficient)", fontsize=10)

    def readout_of(self, result):
        if result.space == SPACES[1]:
            return {
                "passes (wavefronts)": str(result.cost),
                "passes if contiguous": str(result.best_cost),
                "conflict": f"{-(-result.cost // result.best_cost)}-way",
                "relative speed": f"{result.efficiency:.0%}",
            }
        return {
            "sectors": str(result.cost),
            "bytes moved": f"{32 * result.cost} B",
            "sectors if contiguous": str(result.best_cost),
            "efficiency": f"{result.efficiency:.0%}",
        }


# ------------------------------------------------------------------ figures of the recorded GPU run
def plot_sgemm_progression(ax, memory_data: dict) -> None:
    """Bars of TFLOP/s per step of the SGEMM progression, labelled with the % of cuBLAS."""
    sgemm = memory_data["sgemm"]
    steps = [s for s in sgemm["steps"] if "error" not in s]
    values = [s["flop_per_s"] / 1e12 for s in steps] + [sgemm["cublas"]["flop_per_s"] / 1e12]
    labels = [s["step"] for s in steps] + ["cuBLAS"]
    bars = ax.bar(range(len(values)), values, color=["#4c72b0"] * len(steps) + ["#55a868"])
    for bar, step in zip(bars, steps, strict=False):
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            bar.get_height(),
            f"{step['fraction_of_cublas']:.0%}",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xticks(range(len(values)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (FP32)")
    ax.set_title(f"SGEMM {sgemm['n']}³ on {memory_data['device']['name']}: % of cuBLAS", fontsize=10)


def plot_strided_reads(ax, memory_data: dict, copy_bytes_per_s: float) -> None:
    """Measured time of out[i] = x[i * stride] beside the time its traffic takes at copy bandwidth,
    for 32-byte sectors and for 64-byte DRAM bursts (``simt.strided_copy_bytes``)."""
    rows = memory_data["global"]["strided_read"]
    strides = np.array([r["stride"] for r in rows])
    n = rows[0]["n"]
    for granularity, style in ((32, "s--"), (64, "^:")):
        predicted = [simt.strided_copy_seconds(n, s, copy_bytes_per_s, granularity) * 1e6 for s in strides]
        ax.plot(strides, predicted, style, label=f"traffic / copy bandwidth, {granularity}-byte sectors")
    ax.plot(strides, [r["median_s"] * 1e6 for r in rows], "o-", color="#c44e52", label="measured")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stride (floats)")
    ax.set_ylabel("µs")
    ax.set_title(f"out[i] = x[i * stride], {n:,} floats", fontsize=10)
    ax.legend(fontsize=7)


def plot_bank_conflicts(ax, memory_data: dict) -> None:
    """Measured shared-memory time per stride relative to stride 1, beside gcd(stride, 32)."""
    rows = memory_data["shared"]["shared_stride"]
    strides = np.array([r["stride"] for r in rows])
    measured = np.array([r["median_s"] for r in rows]) / rows[0]["median_s"]
    predicted = [simt.strided_bank_conflict(int(s)) for s in strides]
    ax.bar(strides, predicted, color="#dddddd", label="predicted passes (simt)")
    ax.plot(strides, measured, "o", color="#c44e52", label="measured time ratio")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("stride (words)")
    ax.set_ylabel("× stride-1 time")
    ax.legend(fontsize=7)
