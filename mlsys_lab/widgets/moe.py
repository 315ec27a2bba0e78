"""11 mixture of experts: route a batch, cap each expert, and see which tokens overflow."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap

from mlsys_lab.moe.synthetic import route_batch
from mlsys_lab.widgets.base import Explorer, slider

# 0 = not routed, 1 = routed and kept, 2 = routed but over capacity (dropped to the residual)
ROUTING_COLORS = ListedColormap(["#f2f2f2", "#4c72b0", "#c44e52"])


class RoutingExplorer(Explorer):
    """Tokens × experts: which expert each token picks, and which picks overflow the capacity."""

    figsize = (7.0, 3.4)

    def make_controls(self):
        return {"n_tokens": slider("tokens", 64, 8, 256, 8),
                "n_experts": slider("experts", 8, 2, 32),
                "top_k": slider("top-k", 2, 1, 4),
                "capacity_factor": slider("capacity factor", 1.25, 0.5, 3.0, 0.05),
                "skew": slider("router skew", 0.5, 0.0, 3.0, 0.1)}

    def compute(self, n_tokens, n_experts, top_k, capacity_factor, skew):
        return route_batch(n_tokens, n_experts, top_k, capacity_factor, skew)

    def draw(self, figure):
        self.ax_map, self.ax_load = figure.subplots(1, 2, width_ratios=[1.3, 1])
        self.routing_map = self.ax_map.imshow(np.zeros((1, 1)), aspect="auto", cmap=ROUTING_COLORS, vmin=0, vmax=2,
                                        interpolation="nearest")
        self.ax_map.set_xlabel("expert")
        self.ax_map.set_ylabel("token")
        self.ax_map.set_title("blue: kept · red: overflow", fontsize=9)
        self.bars = None  # rebuilt only when the number of experts changes
        self.capacity_line = self.ax_load.axhline(0, color="#c44e52", linestyle="--", label="capacity")
        self.ax_load.set_xlabel("expert")
        self.ax_load.set_ylabel("tokens routed")
        self.ax_load.legend(fontsize=8)

    def redraw(self, result):
        picture, load = result["picture"], result["load"]
        n_tokens, n_experts = picture.shape  # (tokens, experts)
        self.routing_map.set_data(picture)
        self.routing_map.set_extent((-0.5, n_experts - 0.5, n_tokens - 0.5, -0.5))
        if self.bars is None or len(self.bars) != n_experts:
            if self.bars is not None:
                self.bars.remove()
            self.bars = self.ax_load.bar(np.arange(n_experts), load, color="#4c72b0")
        else:
            for bar, height in zip(self.bars, load, strict=True):
                bar.set_height(height)
        self.capacity_line.set_ydata([result["capacity"]] * 2)
        self.ax_load.set_xlim(-0.6, n_experts - 0.4)
        self.ax_load.set_ylim(0, 1.1 * max(float(load.max()), result["capacity"], 1))

    def readout_of(self, result):
        return {"capacity per expert": f"{result['capacity']} tokens",
                "dropped (token, expert) pairs": f"{100 * result['drop_fraction']:.1f} %",
                "load-balancing loss N·Σ f·P": f"{result['aux_loss']:.3f} (1 = balanced)",
                "busiest expert": f"{int(result['load'].max())} tokens"}
