"""03 roofline: where an operator lands on a processor's roofline, and the time that bounds it."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.hardware import PRESETS, Hardware
from mlsys_lab.roofline import (
    OPERATORS,
    attainable_flops,
    littles_law_sweeps,
    measured_hardware,
    measured_kernels,
    operator_cost,
    place,
    ridge_point,
    roofline_curve,
    throughput_with_inflight,
)
from mlsys_lab.units import format_seconds
from mlsys_lab.widgets.base import Explorer, log_slider

INTENSITY_RANGE = (1 / 32, 8192.0)


class RooflineExplorer(Explorer):
    """Pick hardware, an operator and its sizes: the point moves along the roof, the bound and time update."""

    figsize = (6.0, 3.8)

    def __init__(self, extra_hardware: dict[str, Hardware] | None = None) -> None:
        self.hardware = {**PRESETS, **(extra_hardware or {})}
        super().__init__()

    def make_controls(self):
        return {
            "hardware": widgets.Dropdown(
                options=list(self.hardware), value="NVIDIA H200 SXM", description="hardware"
            ),
            "dtype": widgets.Dropdown(
                options=["fp32", "bf16", "fp16", "fp64"], value="fp32", description="dtype"
            ),
            "operator": widgets.Dropdown(options=list(OPERATORS), value="matmul", description="operator"),
            "m": log_slider("m (rows / batch)", 4096, 1, 65536),
            "n": log_slider("n (cols / d)", 4096, 1, 65536),
            "k": log_slider("k (inner, matmul)", 4096, 1, 65536),
        }

    def compute(self, hardware, dtype, operator, m, n, k):
        hw = self.hardware[hardware]
        if dtype not in hw.peak_flop_per_s:
            allowed = ", ".join(hw.peak_flop_per_s)
            raise ValueError(f"dtype must be one of {allowed} for {hw.name}; got {dtype!r}")
        return place(hw, operator_cost(operator, round(m), round(n), round(k), dtype), dtype)

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.ax.set_xscale("log")
        self.ax.set_yscale("log")
        self.ax.set_xlim(*INTENSITY_RANGE)
        self.ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        self.ax.set_ylabel("attainable FLOP/s")
        (self.roof,) = self.ax.plot([], [], color="#4c72b0", lw=2, label="roofline")
        self.ridge = self.ax.axvline(1, color="0.6", ls=":", lw=1)
        (self.point,) = self.ax.plot([], [], "o", color="#c44e52", ms=9, label="operator")
        self.ax.legend(loc="lower right", fontsize=8)
        self.ax.grid(True, which="major", alpha=0.3)

    def redraw(self, result):
        x, y = roofline_curve(result.peak_flops, result.bandwidth, *INTENSITY_RANGE)
        self.roof.set_data(x, y)
        self.ridge.set_xdata([ridge_point(result.peak_flops, result.bandwidth)] * 2)
        intensity = float(np.clip(result.cost.intensity, *INTENSITY_RANGE))
        self.point.set_data([intensity], [result.attainable_flops])
        self.ax.set_ylim(result.peak_flops / 3e4, result.peak_flops * 3)
        self.ax.set_title(f"{result.hardware.name}, {result.dtype}", fontsize=10)

    def readout_of(self, result):
        return {
            "FLOP": f"{result.cost.flop:.3g}",
            "bytes moved (min)": f"{result.cost.n_bytes:.3g}",
            "intensity": f"{result.cost.intensity:.3g} FLOP/byte",
            "ridge point": f"{ridge_point(result.peak_flops, result.bandwidth):.3g} FLOP/byte",
            "bound": result.bound,
            "attainable": f"{result.attainable_flops / 1e12:.3g} TFLOP/s",
            "roofline time": format_seconds(result.seconds),
        }


# ------------------------------------------------------------------ figures of the recorded GPU run
def plot_measured_roofline(ax, roofline_data: dict, memory_data: dict) -> None:
    """Hierarchical roofline of the recorded GPU: HBM, L2 and shared-memory roofs, FP32 peaks, and
    the course's kernels measured (filled) beside their HBM-roofline prediction (open)."""
    gpu = measured_hardware(roofline_data)
    peak = gpu.peak("fp32")
    roofs = {
        "HBM (copy)": (gpu.memory_bandwidth_bytes_per_s, "#4c72b0"),
        "L2": (gpu.cache_bandwidth_bytes_per_s["L2"], "#55a868"),
        "shared memory": (gpu.cache_bandwidth_bytes_per_s["shared"], "#8172b2"),
    }
    x = np.geomspace(*INTENSITY_RANGE, 200)
    for label, (bandwidth, color) in roofs.items():
        ax.plot(
            x,
            attainable_flops(x, peak, bandwidth),
            color=color,
            lw=1.8,
            label=f"{label} {bandwidth / 1e12:.3g} TB/s",
        )
    ax.axhline(67e12, color="0.5", ls="--", lw=1, label="FP32 datasheet 67 TFLOP/s")
    points = measured_kernels(roofline_data, memory_data)
    colors = {True: "#c44e52", False: "#dd8452"}
    for point in points:
        is_gemm = "sgemm" in point.name
        intensity = max(point.cost.intensity, INTENSITY_RANGE[0] * 1.5)
        attainable = point.cost.flop / point.predicted_seconds
        ax.plot([intensity], [point.flop_per_s], "o", color=colors[is_gemm], ms=5)
        ax.plot([intensity], [attainable], "o", mfc="none", color=colors[is_gemm], ms=8)
        label = point.name.removeprefix("sgemm ").removesuffix(" 16384x4096")
        if point.name.startswith("cuBLAS"):
            ax.annotate(
                label, (intensity, point.flop_per_s), xytext=(6, 8), textcoords="offset points", fontsize=6.5
            )
        elif not is_gemm or label in ("naive", "smem", "grouped"):
            ax.annotate(
                label,
                (intensity, point.flop_per_s),
                xytext=(-6, 0),
                textcoords="offset points",
                ha="right",
                va="center",
                fontsize=6.5,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*INTENSITY_RANGE)
    ax.set_ylim(1e10, 3e14)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(
        f"{roofline_data['device']['name']} (FP32), measured {roofline_data['device']['date_utc'][:10]}",
        fontsize=10,
    )
    ax.plot([], [], "o", color="0.3", ms=5, label="kernel, measured")
    ax.plot([], [], "o", mfc="none", color="0.3", ms=8, label="kernel, roofline prediction")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)


def plot_littles_law(axes, roofline_data: dict) -> None:
    """One panel per recorded sweep: measured throughput against work in flight; n / t capped at the peak."""
    for ax, sweep in zip(axes, littles_law_sweeps(roofline_data), strict=True):
        order = np.argsort(sweep.inflight)
        ax.plot(sweep.inflight, sweep.throughput, "o", ms=4, color="#4c72b0", label="measured")
        grid = np.geomspace(sweep.inflight.min(), sweep.inflight.max(), 100)
        ax.plot(
            grid,
            throughput_with_inflight(grid, sweep.latency, sweep.peak),
            color="#c44e52",
            label="Little: min(peak, n / t)",
        )
        ax.set_xscale("log")
        ax.set_title(sweep.label, fontsize=10)
        ax.set_xlabel("in flight" + (" (bytes)" if sweep.unit == "bytes/s" else " per SM"))
        ax.set_ylabel(sweep.unit)
        ax.set_xlim(sweep.inflight[order][0] / 1.5, sweep.inflight[order][-1] * 1.5)
        ax.legend(fontsize=7)
