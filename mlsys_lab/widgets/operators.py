"""01 operators and graphs: where each operator sits on the roofline, and what each graph pass does."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from mlsys_lab.hardware import PRESETS
from mlsys_lab.operators import (
    CATALOGUE,
    OP_CLASS,
    OP_CLASSES,
    PIPELINE,
    Graph,
    bound,
    catalogue_cost,
    layout,
    live_bytes_per_step,
    liveness,
    lower_bound_bytes,
    time_lower_bound_seconds,
    trace,
)
from mlsys_lab.operators.measure import attention_block, elementwise_chain
from mlsys_lab.roofline import attainable_flops, roofline_curve
from mlsys_lab.units import format_seconds, format_si
from mlsys_lab.widgets.base import Explorer

CLASS_COLOURS = {
    "elementwise": "#4c72b0",
    "tensor": "#c44e52",
    "reduction": "#55a868",
    "transform": "#8172b2",
    "input": "#bbbbbb",
    "const": "#dddddd",
}


class OperatorExplorer(Explorer):
    """Pick an operator, a size N, a dtype and a machine: see FLOPs, bytes, intensity and its class."""

    figsize = (6.4, 3.8)

    def make_controls(self):
        return {
            "op_name": widgets.Dropdown(options=list(CATALOGUE), value="matmul", description="operator"),
            "size": widgets.SelectionSlider(
                options=[2**p for p in range(4, 15)], value=1024, description="size N"
            ),
            "dtype": widgets.Dropdown(options=["fp32", "bf16", "fp8"], value="fp32", description="dtype"),
            "hardware": widgets.Dropdown(
                options=list(PRESETS), value="NVIDIA H200 SXM", description="machine"
            ),
        }

    def compute(self, op_name, size, dtype, hardware):
        hw = PRESETS[hardware]
        if dtype not in hw.peak_flop_per_s:
            raise ValueError(
                f"dtype must be one of {', '.join(hw.peak_flop_per_s)} on {hw.name}; got {dtype!r}"
            )
        costs = {name: catalogue_cost(name, size, dtype) for name in CATALOGUE}
        return {"costs": costs, "selected": costs[op_name], "hw": hw, "dtype": dtype}

    def draw(self, figure):
        ax = self.ax = figure.add_subplot()
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1e-2, 1e4)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("attainable FLOP/s")
        (self.roof,) = ax.plot([], [], color="black", lw=1.5)
        self.ridge = ax.axvline(1.0, color="grey", ls=":", lw=1)
        self.points = {name: ax.plot([], [], "o", ms=5, alpha=0.35)[0] for name in CATALOGUE}
        (self.selected,) = ax.plot([], [], "o", ms=11, mfc="none", mec="black", mew=2)
        self.label = ax.text(0.02, 0.95, "", transform=ax.transAxes, va="top", fontsize=9)
        for op_class in OP_CLASSES:
            ax.plot([], [], "o", color=CLASS_COLOURS[op_class], label=op_class)
        ax.legend(loc="lower right", fontsize=8)

    def redraw(self, result):
        hw, dtype = result["hw"], result["dtype"]
        peak, bandwidth = hw.peak(dtype), hw.memory_bandwidth_bytes_per_s
        self.roof.set_data(*roofline_curve(peak, bandwidth, 1e-2, 1e4))
        self.ridge.set_xdata([hw.ridge_point(dtype)] * 2)
        for name, cost in result["costs"].items():
            x = max(cost.intensity, 1.2e-2)  # a reshape (0 FLOP, 0 bytes) is parked at the left edge
            self.points[name].set_data([x], [attainable_flops(x, peak, bandwidth)])
            self.points[name].set_color(CLASS_COLOURS[cost.op_class])
        chosen = result["selected"]
        x = max(chosen.intensity, 1.2e-2)
        self.selected.set_data([x], [attainable_flops(x, peak, bandwidth)])
        self.ax.set_ylim(bandwidth * 1e-2 / 2, peak * 3)
        self.label.set_text(
            f"{chosen.name}: {chosen.op_class}, {bound(chosen, hw, dtype)}\n"
            f"ridge point {hw.ridge_point(dtype):.0f} FLOP/B ({hw.name}, {dtype})"
        )

    def readout_of(self, result):
        cost, hw, dtype = result["selected"], result["hw"], result["dtype"]
        return {
            "shape": cost.shape_text,
            "FLOPs": format_si(cost.flop, "FLOP"),
            "bytes moved": format_si(cost.n_bytes, "B"),
            "intensity": f"{cost.intensity:.3g} FLOP/B",
            "class": cost.op_class,
            "bound": bound(cost, hw, dtype),
            "time ≥": format_seconds(time_lower_bound_seconds(cost, hw, dtype)),
        }


def draw_graph(ax: Axes, graph: Graph, title: str = "") -> None:
    """Draw ``graph`` top to bottom: a box per tensor, coloured by operator class, arrows for data flow."""
    positions = layout(graph)
    for node in graph.nodes:
        if node.name not in positions:
            continue
        x, y = positions[node.name]
        for name in node.inputs:
            if name in positions:
                px, py = positions[name]
                ax.annotate(
                    "",
                    xy=(x, y + 0.18),
                    xytext=(px, py - 0.18),
                    arrowprops={"arrowstyle": "->", "color": "#777777", "lw": 0.8},
                )
        text = node.attrs.get("param", node.op) if node.op == "input" else node.op
        if node.op == "fused":
            text = node.attrs["ops"].replace("→", "→\n") if len(node.attrs["ops"]) > 14 else node.attrs["ops"]
        consts = [f"{graph.node(i).attrs['value']:g}" for i in node.inputs if graph.node(i).op == "const"]
        if consts:
            text += f" ({', '.join(consts)})"
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=7,
            bbox={"boxstyle": "round,pad=0.25", "fc": CLASS_COLOURS[OP_CLASS[node.op]], "alpha": 0.35},
        )
    xs = [p[0] for p in positions.values()] or [0]
    ys = [p[1] for p in positions.values()] or [0]
    ax.set_xlim(min(xs) - 1, max(xs) + 1)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_axis_off()
    ax.set_title(title or f"{graph.n_kernels} kernels", fontsize=9)


# program -> (function, input shapes): the two programs of the lesson.
PROGRAMS = {
    "elementwise chain": (elementwise_chain, [(256, 1024), (256, 1024), (1024,)]),
    "attention": (attention_block, [(4, 256, 64)] * 3),
}


class PassExplorer(Explorer):
    """Pick a program and switch each pass on or off: see the graph, its kernels, bytes and peak memory."""

    figsize = (6.4, 4.2)

    def make_controls(self):
        controls = {
            "program": widgets.Dropdown(options=list(PROGRAMS), value="attention", description="program")
        }
        for graph_pass in PIPELINE:
            controls[graph_pass.__name__] = widgets.Checkbox(value=True, description=graph_pass.__name__)
        return controls

    def compute(self, program, **enabled):
        function, shapes = PROGRAMS[program]
        graph = trace(function, *shapes)
        before = graph
        for graph_pass in PIPELINE:
            if enabled[graph_pass.__name__]:
                graph = graph_pass(graph)
        return {"before": before, "after": graph}

    def draw(self, figure):
        self.ax_before, self.ax_after = figure.subplots(1, 2)
        for ax in (self.ax_before, self.ax_after):
            # No ticks at all: a hidden axis is still measured when the title is placed, every frame.
            ax.xaxis.set_visible(False)
            ax.yaxis.set_visible(False)

    def redraw(self, result):
        # The graph's shape changes with the passes, so both drawings are rebuilt inside the same axes.
        # Removing the old boxes and arrows is cheaper than ax.clear(), which rebuilds the axes' ticks.
        for ax, key, title in (
            (self.ax_before, "before", "traced"),
            (self.ax_after, "after", "after passes"),
        ):
            for artist in [*ax.texts, *ax.patches, *ax.lines, *ax.collections]:
                artist.remove()
            draw_graph(ax, result[key], f"{title}: {result[key].n_kernels} kernels")

    def readout_of(self, result):
        rows = {}
        for key in ("before", "after"):
            graph = result[key]
            rows[f"{key}: kernels"] = str(graph.n_kernels)
            rows[f"{key}: bytes moved"] = format_si(graph.bytes_moved(), "B")
            rows[f"{key}: peak live"] = format_si(lower_bound_bytes(liveness(graph)), "B")
        return rows


def plot_fusion_sweep(ax: Axes, records: list[dict], title: str) -> None:
    """Eager and fused time against size; dashed: the fused time the bytes predict
    (eager × fused/eager bytes)."""
    n = np.array([r["n_elements"] for r in records], dtype=float)
    eager = np.array([r["eager_seconds"] for r in records])
    fused = np.array([r["fused_seconds"] for r in records])
    predicted = eager * np.array([r["fused_bytes"] / r["eager_bytes"] for r in records])
    ax.loglog(
        n, eager, "o-", color=CLASS_COLOURS["tensor"], label=f"eager ({records[0]['eager_kernels']} kernels)"
    )
    ax.loglog(n, fused, "o-", color=CLASS_COLOURS["elementwise"], label="fused (1 kernel)")
    ax.loglog(n, predicted, "--", color=CLASS_COLOURS["elementwise"], alpha=0.6, label="eager × bytes ratio")
    ax.set_xlabel("elements per tensor")
    ax.set_ylabel("seconds (median)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def plot_live_bytes(ax: Axes, graphs: dict[str, Graph]) -> None:
    """Live tensor bytes at each step of each graph's order (the area under the curve is
    what a plan packs)."""
    for label, graph in graphs.items():
        live = live_bytes_per_step(liveness(graph))
        ax.step(
            np.arange(len(live)),
            live / 2**20,
            where="post",
            label=f"{label} (peak {live.max() / 2**20:.2f} MiB)",
        )
    ax.set_xlabel("step (kernel)")
    ax.set_ylabel("live MiB")
    ax.legend(fontsize=7)


def plot_plan(ax: Axes, intervals, offsets: dict[str, int], title: str = "") -> None:
    """A memory plan as rectangles: x = steps a tensor is live, y = its byte range in the arena."""
    colours = np.array(["#4c72b0", "#c44e52", "#55a868", "#8172b2", "#ccb974", "#64b5cd"])
    top = 1
    for i, iv in enumerate(intervals):
        y0, height = offsets[iv.name] / 2**20, iv.n_bytes / 2**20
        ax.add_patch(
            Rectangle(
                (iv.start - 0.45, y0),
                iv.end - iv.start + 0.9,
                height,
                fc=colours[i % len(colours)],
                ec="black",
                lw=0.5,
                alpha=0.7,
            )
        )
        ax.text(iv.start - 0.35, y0 + height / 2, iv.name, fontsize=6, va="center")
        top = max(top, y0 + height)
    ax.set_xlim(-1, max(iv.end for iv in intervals) + 1)
    ax.set_ylim(0, top * 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("arena offset (MiB)")
    ax.set_title(title, fontsize=9)
