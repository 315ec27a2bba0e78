"""02 loop transformations: pick a loop order and a tile size; see the cache model and the measured time."""

from __future__ import annotations

import functools

import ipywidgets as widgets
import numpy as np

from mlsys_lab.loops.cache_model import simulate_matmul_misses
from mlsys_lab.loops.matmul import ORDER_CODES, flop, matmul_blocked
from mlsys_lab.timing import benchmark
from mlsys_lab.units import format_seconds
from mlsys_lab.validation import check_choice
from mlsys_lab.widgets.base import Explorer

TILES = (4, 8, 16, 32, 64, 128)
L1_BYTES, LINE_BYTES, WAYS = 32 * 1024, 64, 8  # a typical L1 data cache


@functools.lru_cache(maxsize=8)
def miss_curves(n: int) -> dict[str, np.ndarray]:
    """Simulated L1 misses per inner iteration (per n³) for each order over ``TILES`` (tile = n: untiled)."""
    return {order: np.array([simulate_matmul_misses(n, order, min(t, n), L1_BYTES, LINE_BYTES, WAYS)["total"]
                             for t in TILES]) / n**3 for order in ORDER_CODES}


def measure_blocked(n: int, order: str, tile: int, repeat: int = 3) -> float:
    """Median seconds of :func:`matmul_blocked` on random n x n float64 matrices."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    out = np.empty((n, n))
    return benchmark(lambda: matmul_blocked(a, b, out, order, tile), warmup=1, repeat=repeat).median


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
        return {"n": n, "order": order, "tile": min(tile, n), "curves": curves,
                "misses": curves[order][TILES.index(tile)], "seconds": seconds, "baseline_s": baseline}

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
        work = flop(result["n"])
        rates = [work / result["baseline_s"] / 1e9, work / result["seconds"] / 1e9]
        for bar, rate in zip(self.bars, rates, strict=True):
            bar.set_height(rate)
        self.ax_time.set_ylim(0, max(rates) * 1.2)
        self.ax_time.set_title(f"{result['order']}, tile {result['tile']}, n={result['n']}", fontsize=9)

    def readout_of(self, result):
        return {"model: L1 misses / iteration": f"{result['misses']:.3f}",
                "measured time": format_seconds(result["seconds"]),
                "speed-up over ijk untiled": f"{result['baseline_s'] / result['seconds']:.2f}x"}


def side_by_side(before, after, titles: tuple[str, str] = ("before", "after")):
    """Two functions' source code in two columns (numba dispatchers show their Python source)."""
    import html
    import inspect

    from IPython.display import HTML

    def source(fn) -> str:
        return html.escape(inspect.getsource(getattr(fn, "py_func", fn)))

    pairs = zip(titles, (before, after), strict=True)
    cells = "".join(f"<td style='vertical-align:top;padding-right:1em'><b>{html.escape(t)}</b>"
                    f"<pre style='font-size:11px'>{source(f)}</pre></td>" for t, f in pairs)
    return HTML(f"<table><tr>{cells}</tr></table>")
