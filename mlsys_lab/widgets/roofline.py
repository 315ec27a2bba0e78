"""03 roofline: where an operator lands on a processor's roofline, and the time that bounds it."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.hardware import H200, PRESETS, Hardware
from mlsys_lab.roofline import (
    OPERATORS,
    attainable_flops,
    littles_law_sweeps,
    loaded_latency,
    measured_hardware,
    measured_kernels,
    operator_cost,
    place,
    ridge_point,
    roofline_curve,
    throughput_with_inflight,
)
from mlsys_lab.units import format_seconds
from mlsys_lab.widgets.base import Explorer

INTENSITY_RANGE = (1 / 32, 8192.0)
DATASHEET_FP32, DATASHEET_HBM = H200.peak("fp32"), H200.memory_bandwidth_bytes_per_s  # 67 TFLOP/s, 4.8 TB/s


def _size_slider(description: str, value: int, high: int = 65536) -> widgets.FloatLogSlider:
    """A log slider fine enough (0.1% a step) to land on every integer up to ~400, e.g. the batch of a crossing."""
    return widgets.FloatLogSlider(value=value, base=10, min=0, max=float(np.log10(high)), step=0.001,
                                  description=description, style={"description_width": "initial"})


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
            "m": _size_slider("m (rows / batch)", 4096),
            "n": _size_slider("n (cols / d)", 4096),
            "k": _size_slider("k (inner, matmul)", 4096),
        }

    def _show_error(self, text: str) -> None:
        """An error clears the readout: numbers of the previous choice must never stand beside it."""
        self.result, self.readout = None, {}
        self.readout_html.value = ""
        return super()._show_error(text)

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
            "sizes (m, n, k)": ", ".join(str(round(v)) for v in (self.values["m"], self.values["n"], self.values["k"])),
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
    """The recorded GPU's FP32 roofline against HBM traffic, with two kinds of ceiling: the datasheet's (dashed,
    independent of any run) and the measured microbenchmarks' (solid: a copy kernel's bandwidth, cuBLAS's FP32
    rate); the course's kernels measured (filled) beside their prediction on the measured roofs (open)."""
    gpu = measured_hardware(roofline_data)
    peak, bandwidth = gpu.peak("fp32"), gpu.memory_bandwidth_bytes_per_s
    x = np.geomspace(*INTENSITY_RANGE, 200)
    ax.plot(x, attainable_flops(x, DATASHEET_FP32, DATASHEET_HBM), color="0.45", ls="--", lw=1.2,
            label=f"datasheet: {DATASHEET_HBM / 1e12:.3g} TB/s, {DATASHEET_FP32 / 1e12:.0f} TFLOP/s")
    ax.plot(x, attainable_flops(x, peak, bandwidth), color="#4c72b0", lw=1.8,
            label=f"measured: copy {bandwidth / 1e12:.3g} TB/s, cuBLAS {peak / 1e12:.3g} TFLOP/s")
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
            ax.annotate(label, (intensity, point.flop_per_s), xytext=(6, 8), textcoords="offset points", fontsize=6.5)
        elif not is_gemm or label in ("naive", "smem", "grouped"):
            ax.annotate(label, (intensity, point.flop_per_s), xytext=(-6, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=6.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*INTENSITY_RANGE)
    ax.set_ylim(1e10, 3e14)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte, minimum traffic)")
    ax.set_ylabel("FLOP/s")
    device = roofline_data["device"]
    ax.set_title(f"{device['name']} (FP32, HBM roof), measured {device['date_utc'][:10]}", fontsize=10)
    ax.plot([], [], "o", color="0.3", ms=5, label="kernel, measured")
    ax.plot([], [], "o", mfc="none", color="0.3", ms=8, label="kernel, roofline prediction (measured roofs)")
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
        if sweep.unit == "bytes/s":  # HBM: the law again with the latency under load, read off the sweep at its knee
            loaded = loaded_latency(sweep.inflight, sweep.throughput)
            ax.plot(grid, throughput_with_inflight(grid, loaded, sweep.peak), color="#55a868", ls="--",
                    label=f"min(peak, n / t), loaded t = {loaded * 1e9:.0f} ns")
        ax.set_xscale("log")
        ax.set_title(sweep.label, fontsize=10)
        ax.set_xlabel("in flight" + (" (bytes)" if sweep.unit == "bytes/s" else " per SM"))
        ax.set_ylabel(sweep.unit)
        ax.set_xlim(sweep.inflight[order][0] / 1.5, sweep.inflight[order][-1] * 1.5)
        ax.legend(fontsize=7)


def plot_tensor_core_roofline(ax, hardware, dots, provenance: str) -> None:
    """The BF16 roofline of ``hardware`` (datasheet: dense tensor-core peak, HBM bandwidth) with the FP32 roof
    beneath it, and measured tensor-core kernels (``memory_hierarchy.tensor_cores.roofline_dots``) on it:
    the course's GEMMs labelled on the right of their column, attention kernels and cuBLAS on the left."""
    x = np.geomspace(10, 2e4, 200)
    bandwidth = hardware.memory_bandwidth_bytes_per_s
    ax.plot(x, attainable_flops(x, hardware.peak("bf16"), bandwidth), color="#4c72b0", lw=1.8,
            label=f"BF16 tensor cores: {hardware.peak('bf16') / 1e12:.0f} TFLOP/s, ridge "
                  f"{hardware.ridge_point('bf16'):.0f} FLOP/B")
    ax.plot(x, attainable_flops(x, hardware.peak("fp32"), bandwidth), color="0.5", ls="--", lw=1.2,
            label=f"FP32 CUDA cores: {hardware.peak('fp32') / 1e12:.0f} TFLOP/s, ridge "
                  f"{hardware.ridge_point('fp32'):.0f} FLOP/B")
    for dot in dots:
        attention = "attention" in dot.name or "SDPA" in dot.name
        color = "0.3" if dot.vendor else ("#c44e52" if attention else "#dd8452")
        ax.plot([dot.intensity], [dot.flop_per_s], "s" if dot.vendor else "o", color=color, ms=5)
        label = dot.name.replace("flash attention, ", "yours, ").replace("SDPA flash, ", "SDPA, ")
        left = attention or dot.vendor  # cuBLAS sits on wgmma's dot: its label goes the other way
        ax.annotate(label, (dot.intensity, dot.flop_per_s), xytext=(-6 if left else 6, 0),
                    textcoords="offset points", ha="right" if left else "left", va="center", fontsize=6.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(10, 2e4)
    ax.set_ylim(3e13, 1.6e15)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte, minimum traffic)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"tensor-core kernels on the BF16 roofline ({provenance})", fontsize=10)
    ax.plot([], [], "o", color="#dd8452", ms=5, label="the course's BF16 GEMM ladder (8192³)")
    ax.plot([], [], "o", color="#c44e52", ms=5, label="the course's FlashAttention-2 (N = 4096, d = 128)")
    ax.plot([], [], "s", color="0.3", ms=5, label="cuBLAS / PyTorch SDPA (yardsticks)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)


# ------------------------------------------------------------------ a learner's CUDA kernel beside the course's
def plot_kernel_race(ax, race, title: str) -> None:
    """The roof of a kernel, measured: the ceiling (``race.anchor``: a device-to-device copy for a memory-bound
    kernel, cuBLAS for a GEMM), the course's kernel ("course") and the learner's ("yours"), as bars of GB/s or
    TFLOP/s on one GPU, each labelled with its share of the ceiling's
    (:class:`mlsys_lab.exercises.cuda_kernels.KernelRace`)."""
    rates_of = race.rates
    anchor = race.anchor
    roof = "the memory roof" if anchor == "copy" else "the compute roof reached"
    labels = {anchor: f"{anchor} ({roof})", "course": "the course's kernel", "yours": "your kernel"}
    order = [key for key in (anchor, "course", "yours") if key in rates_of]
    scale, unit = (1e9, "GB/s") if race.unit == "B" else (1e12, "TFLOP/s")
    rates = [rates_of[key] / scale for key in order]
    colors = {anchor: "0.6", "course": "#4c72b0", "yours": "#c44e52"}
    bars = ax.barh([labels[key] for key in order], rates, color=[colors[key] for key in order])
    ceiling = rates_of.get(anchor)
    for bar, key, rate in zip(bars, order, rates, strict=True):
        share = f", {rates_of[key] / ceiling:.0%} of {anchor}" if ceiling and key != anchor else ""
        ax.annotate(f"{rate:,.0f} {unit}{share}", (rate, bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(rates) * 1.35)
    what = "the bytes the kernel must move" if race.unit == "B" else "the GEMM's 2·M·N·K FLOPs"
    ax.set_xlabel(f"{unit} ({what}, per second)")
    ax.set_title(f"{title} on {race.device}", fontsize=10)
