"""05 autotuning: replay a search strategy on the recorded GPU tuning run and watch best-found vs budget."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.autotuning import STRATEGIES, evaluations_to_reach, recorded_space, strategy_curves
from mlsys_lab.widgets.base import Explorer, slider


class SearchExplorer(Explorer):
    """Strategy and budget: the median (and quartiles) of best-found / optimum over seeds."""

    figsize = (6.4, 3.2)

    def make_controls(self):
        return {
            "strategy": widgets.Dropdown(options=list(STRATEGIES), value="random", description="strategy"),
            "budget": slider("measurements", 40, 10, 80, 10),
            "seeds": slider("seeds", 10, 5, 20, 5),
        }

    def compute(self, strategy, budget, seeds):
        space = recorded_space()
        curves = strategy_curves(strategy, space, budget, seeds)
        reach = evaluations_to_reach(curves, within=1.05)
        return {"strategy": strategy, "curves": curves, "reach": reach, "n_configs": len(space["seconds"])}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        (self.median_line,) = self.ax.plot([1], [1], color="#4c72b0", label="median over seeds")
        self.band = None
        self.ax.axhline(1.0, color="k", lw=0.8)
        self.ax.axhline(1.05, color="k", lw=0.8, ls=":", label="within 5%")
        self.ax.set_xlabel("measurements")
        self.ax.set_ylabel("best found / best of space")
        self.ax.legend(fontsize=8)

    def redraw(self, result):
        curves = result["curves"]
        steps = np.arange(1, curves.shape[1] + 1)
        self.median_line.set_data(steps, np.median(curves, axis=0))
        if self.band is not None:
            self.band.remove()
        low, high = np.percentile(curves, 25, axis=0), np.percentile(curves, 75, axis=0)
        self.band = self.ax.fill_between(steps, low, high, color="#4c72b0", alpha=0.25)
        self.ax.set_xlim(1, steps[-1])
        self.ax.set_ylim(0.95, max(2.0, float(np.percentile(curves[:, 0], 75))))
        self.ax.set_title(f"{result['strategy']} on {result['n_configs']} recorded H200 configs", fontsize=9)

    def readout_of(self, result):
        curves, reach = result["curves"], result["reach"]
        found = (reach <= curves.shape[1]).mean()
        return {"median best/optimum at budget": f"{np.median(curves[:, -1]):.3f}",
                "seeds within 5% of best": f"{found:.0%}",
                "median measurements to within 5%": (f"{np.median(reach):.0f}" if found >= 0.5
                                                     else f"> {curves.shape[1]}")}
