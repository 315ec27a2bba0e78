"""02 loop transformations: pick a loop order and a tile size; see the cache model and the measured time."""

from __future__ import annotations

import html
import inspect

import ipywidgets as widgets
import numpy as np
from IPython.display import HTML

from mlsys_lab.loops.cache_model import TILES, miss_curves
from mlsys_lab.loops.matmul import ORDER_CODES
from mlsys_lab.loops.measure import cpu_ladder_rates, gpu_ladder_rates, measure_blocked
from mlsys_lab.operators.cost import matmul_cost
from mlsys_lab.units import format_seconds
from mlsys_lab.validation import check_choice
from mlsys_lab.widgets.base import Explorer


class LoopOrderExplorer(Explorer):
    """Loop order x tile size of an n x n matmul: cache misses predicted by the model, time measured here."""

    figsize = (7.2, 3.0)

    def make_controls(self):
        return {
            "order": widgets.Dropdown(options=list(ORDER_CODES), value="ijk", description="loop order"),
            "tile": widgets.SelectionSlider(options=list(TILES), value=128, description="tile"),
            "n": widgets.Dropdown(options=[64, 96, 128], value=128, description="n"),
        }

    def compute(self, order, tile, n):
        check_choice("order", order, ORDER_CODES)
        curves = miss_curves(n)
        seconds = measure_blocked(n, order, min(tile, n))
        baseline = measure_blocked(n, "ijk", n)
        flop = matmul_cost(n, n, n, "fp64").flop
        return {"n": n, "order": order, "tile": min(tile, n), "curves": curves,
                "misses": curves[order][TILES.index(tile)], "seconds": seconds, "baseline_s": baseline,
                "rates": [flop / baseline, flop / seconds]}

    def draw(self, figure):
        self.ax_miss, self.ax_time = figure.subplots(1, 2)
        self.lines = {o: self.ax_miss.plot(TILES, np.ones(len(TILES)), marker="o", ms=3, label=o)[0]
                      for o in ORDER_CODES}
        (self.marker,) = self.ax_miss.plot([TILES[-1]], [1.0], "o", ms=11, mfc="none", mec="k")
        self.ax_miss.set_xscale("log", base=2)
        self.ax_miss.set_xlabel("tile side")
        self.ax_miss.set_ylabel("L1 misses / iteration (model)")
        self.ax_miss.legend(fontsize=8)
        self.bars = self.ax_time.bar(["ijk untiled", "chosen"], [1.0, 1.0], color=["#999999", "#4c72b0"])
        self.ax_time.set_ylabel("GFLOP/s measured here")

    def redraw(self, result):
        for order, line in self.lines.items():
            line.set_ydata(result["curves"][order])
        self.ax_miss.relim()
        self.ax_miss.autoscale_view()
        self.marker.set_data([result["tile"]], [result["misses"]])
        rates = [rate / 1e9 for rate in result["rates"]]
        for bar, rate in zip(self.bars, rates, strict=True):
            bar.set_height(rate)
        self.ax_time.set_ylim(0, max(rates) * 1.2)
        self.ax_time.set_title(f"{result['order']}, tile {result['tile']}, n={result['n']}", fontsize=9)

    def readout_of(self, result):
        return {"model: L1 misses / iteration": f"{result['misses']:.3f}",
                "measured time": format_seconds(result["seconds"]),
                "speed-up over ijk untiled": f"{result['baseline_s'] / result['seconds']:.2f}x"}


def draw_side_by_side(before, after, titles: tuple[str, str] = ("before", "after")) -> HTML:
    """Two functions' source code in two columns (numba dispatchers show their Python source)."""

    def source(fn) -> str:
        return html.escape(inspect.getsource(getattr(fn, "py_func", fn)))

    pairs = zip(titles, (before, after), strict=True)
    cells = "".join(f"<td style='vertical-align:top;padding-right:1em'><b>{html.escape(t)}</b>"
                    f"<pre style='font-size:11px'>{source(f)}</pre></td>" for t, f in pairs)
    return HTML(f"<table><tr>{cells}</tr></table>")


def plot_recorded_ladders(ax_cpu, ax_gpu, cpu_run: dict, gpu_run: dict) -> None:
    """The matmul ladders recorded on a CPU (float64, medians as bars, fastest runs as ticks) and a GPU
    (float32): FLOP/s of each step, from ``records.load("loops_cpu")`` and ``records.load("loops_gpu")``."""
    steps, fastest = cpu_ladder_rates(cpu_run), cpu_ladder_rates(cpu_run, "min_seconds")
    ax_cpu.bar(list(steps), np.array(list(steps.values())) / 1e9, color="#4c72b0", label="median")
    ax_cpu.plot(list(fastest), np.array(list(fastest.values())) / 1e9, "k_", ms=14, label="fastest run")
    ax_cpu.legend(fontsize=8)
    ax_cpu.set_ylabel("GFLOP/s (float64)")
    ax_cpu.set_yscale("log")
    ax_cpu.set_title(f"CPU: {cpu_run['machine'][:28]}, {cpu_run['cores']} cores, n={cpu_run['matmul_n']}",
                     fontsize=9)
    gpu = gpu_ladder_rates(gpu_run)
    ax_gpu.bar(list(gpu), np.array(list(gpu.values())) / 1e12, color="#dd8452")
    ax_gpu.set_ylabel("TFLOP/s (float32)")
    ax_gpu.set_title(f"GPU: {gpu_run['device'].split(' · ')[1]}, n={gpu_run['matmul_n']}", fontsize=9)
    for ax in (ax_cpu, ax_gpu):
        ax.tick_params(axis="x", labelsize=7, rotation=45)


def plot_misses_vs_time(ax, sweep: dict) -> None:
    """Measured time against simulated L1 misses per iteration, one colour per loop order
    (``loops.measure.blocked_sweep``)."""
    for order in dict.fromkeys(sweep["order"]):
        chosen = sweep["order"] == order
        ax.scatter(sweep["misses"][chosen], sweep["seconds"][chosen] * 1e3, label=order)
    ax.set_xlabel("model: L1 misses / iteration")
    ax.set_ylabel("measured ms")
    ax.set_yscale("log")
    ax.legend()
