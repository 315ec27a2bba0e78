"""07 collectives: explorers over the simulated ring, the α-β model, topologies and bucketed overlap."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from matplotlib import colormaps
from matplotlib.collections import LineCollection
from matplotlib.patches import Rectangle

from mlsys_lab.collectives import cost, simulate
from mlsys_lab.collectives.overlap import bucketed_timeline, transformer_gradients
from mlsys_lab.collectives.topology import (
    TOPOLOGIES,
    bisection_bandwidth,
    bisection_links,
    build,
    diameter,
    link_count,
)
from mlsys_lab.units import format_seconds
from mlsys_lab.widgets.base import Explorer, log_slider, slider

MAX_RANKS = 8
COLORS = {"naive": "#c44e52", "ring": "#4c72b0", "tree": "#55a868", "halving_doubling": "#8172b2"}


class RingAllReduceExplorer(Explorer):
    """Step through the ring all-reduce: reduce-scatter fills one chunk per rank, all-gather spreads them."""

    figsize = (5.2, 3.6)

    def make_controls(self):
        return {
            "n_ranks": slider("ranks p", 4, 2, MAX_RANKS),
            "step": slider("round", 0, 0, 2 * (MAX_RANKS - 1)),
        }

    def compute(self, n_ranks, step):
        return simulate.ring_state(n_ranks, step)

    def draw(self, figure):
        self.ax = figure.add_subplot()
        cmap = colormaps["Blues"].with_extremes(bad="white")
        self.grid = self.ax.imshow(
            np.zeros((MAX_RANKS, MAX_RANKS)), cmap=cmap, vmin=0, vmax=1.15, origin="upper"
        )
        self.labels = [
            [self.ax.text(c, r, "", ha="center", va="center", fontsize=8) for c in range(MAX_RANKS)]
            for r in range(MAX_RANKS)
        ]
        self.ax.set_xlabel("chunk")
        self.ax.set_ylabel("rank")

    def redraw(self, result):
        p = result.n_ranks
        shown = np.full((MAX_RANKS, MAX_RANKS), np.nan)
        shown[:p, :p] = result.contributions / p
        self.grid.set_data(np.ma.masked_invalid(shown))
        for r in range(MAX_RANKS):
            for c in range(MAX_RANKS):
                inside = r < p and c < p
                self.labels[r][c].set_text(f"{result.contributions[r, c]}/{p}" if inside else "")
                self.labels[r][c].set_color(
                    "white" if inside and result.contributions[r, c] == p else "black"
                )
        self.ax.set_xlim(-0.5, p - 0.5)
        self.ax.set_ylim(p - 0.5, -0.5)
        self.ax.set_xticks(range(p))
        self.ax.set_yticks(range(p))
        self.ax.set_title(f"{result.phase}, after round {result.step} of {2 * (p - 1)}", fontsize=10)

    def readout_of(self, result):
        p = result.n_ranks
        full = [f"{r}→{c}" for r in range(p) for c in range(p) if result.contributions[r, c] == p]
        return {
            "phase": result.phase,
            "sent per rank so far (1 MiB vector)": f"{result.bytes_sent_per_rank / 2**10:.0f} KiB",
            "at the end": f"{cost.allreduce_coefficients('ring', p)[1] * 1024:.0f} KiB = 2(p−1)/p × 1 MiB",
            "finished (rank→chunk)": ", ".join(full[:8]) + (" ..." if len(full) > 8 else "") or "none yet",
        }


class AlphaBetaExplorer(Explorer):
    """All-reduce time against message size for four algorithms under the α-β model, with crossovers."""

    figsize = (6.0, 3.8)
    sizes = np.logspace(np.log10(2**10), np.log10(2**32), 160)

    def make_controls(self):
        return {
            "n_ranks": slider("ranks p", 64, 2, 1024),
            "alpha_us": log_slider("α (µs)", 10.0, 0.5, 200.0),
            "bandwidth_gb_s": log_slider("link GB/s", 50.0, 1.0, 900.0),
        }

    def compute(self, n_ranks, alpha_us, bandwidth_gb_s):
        alpha, beta = alpha_us * 1e-6, 1 / (bandwidth_gb_s * 1e9)
        times = {a: cost.allreduce_time(a, self.sizes, n_ranks, alpha, beta) for a in cost.ALGORITHMS}
        crossings = {
            f"{a} = ring": cost.crossover_bytes(a, "ring", n_ranks, alpha, beta)
            for a in ("tree", "halving_doubling")
        }
        return {"times": times, "crossings": crossings, "n_ranks": n_ranks, "alpha": alpha, "beta": beta}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.lines = {
            a: self.ax.loglog(self.sizes, self.sizes, label=a, color=COLORS[a])[0] for a in cost.ALGORITHMS
        }
        self.marks = self.ax.scatter([], [], color="black", zorder=3, s=18, label="crossover with ring")
        self.ax.set_xlabel("message size (bytes)")
        self.ax.set_ylabel("all-reduce time (s)")
        self.ax.legend(fontsize=7, loc="upper left")
        self.ax.grid(True, which="major", alpha=0.3)

    def redraw(self, result):
        for a, line in self.lines.items():
            line.set_ydata(result["times"][a])
        points = [
            (n, float(cost.allreduce_time("ring", n, result["n_ranks"], result["alpha"], result["beta"])))
            for n in result["crossings"].values()
            if np.isfinite(n) and self.sizes[0] <= n <= self.sizes[-1]
        ]
        self.marks.set_offsets(np.array(points) if points else np.empty((0, 2)))
        every = np.concatenate(list(result["times"].values()))
        self.ax.set_ylim(every.min() / 2, every.max() * 2)

    def readout_of(self, result):
        p, alpha, beta = result["n_ranks"], result["alpha"], result["beta"]
        rows = {
            f"best at {label}": cost.best_algorithm(n, p, alpha, beta)
            for label, n in (("4 KiB", 2**12), ("1 MiB", 2**20), ("1 GiB", 2**30))
        }
        rows["ring latency = bandwidth term at"] = _bytes(
            cost.latency_bandwidth_balance_bytes("ring", p, alpha, beta)
        )
        rows.update({k: _bytes(v) if np.isfinite(v) else "never" for k, v in result["crossings"].items()})
        return rows


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


class TopologyExplorer(Explorer):
    """Draw a topology and read its diameter, link count and bisection bandwidth."""

    figsize = (4.6, 3.8)

    def make_controls(self):
        return {
            "topology": widgets.Dropdown(
                options=list(TOPOLOGIES), value="torus_2d", description="topology"
            ),
            "n_nodes": slider("nodes", 16, 2, 64),
            "link_gb_s": log_slider("link GB/s", 50.0, 1.0, 900.0),
        }

    def compute(self, topology, n_nodes, link_gb_s):
        graph = build(topology, n_nodes)
        return {
            "graph": graph,
            "diameter": diameter(topology, n_nodes),
            "links": link_count(topology, n_nodes),
            "bisection_links": bisection_links(topology, n_nodes),
            "bisection": bisection_bandwidth(topology, n_nodes, link_gb_s * 1e9),
        }

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.edges = LineCollection([], colors="#888888")
        self.ax.add_collection(self.edges)
        self.hosts = self.ax.scatter([], [], s=30, color="#4c72b0", zorder=3, label="host / GPU")
        self.switches = self.ax.scatter([], [], s=30, marker="s", color="#dd8452", zorder=3, label="switch")
        self.ax.set_axis_off()
        self.ax.legend(fontsize=7, loc="upper left")

    def redraw(self, result):
        graph = result["graph"]
        pos = graph.positions
        segments = [line for line, _ in graph.segments()]
        self.edges.set_segments(segments)
        self.edges.set_linewidths([0.6 + 1.2 * np.log2(c) for _, c in graph.segments()])
        self.hosts.set_offsets(pos[: graph.n_nodes])
        self.switches.set_offsets(
            pos[graph.n_nodes :] if graph.n_vertices > graph.n_nodes else np.empty((0, 2))
        )
        every = np.concatenate(segments + [pos])
        self.ax.set_xlim(every[:, 0].min() - 0.3, every[:, 0].max() + 0.3)
        self.ax.set_ylim(every[:, 1].min() - 0.3, every[:, 1].max() + 0.3)
        self.ax.set_title(f"{graph.name}, {graph.n_nodes} hosts", fontsize=10)

    def readout_of(self, result):
        return {
            "diameter (hops)": str(result["diameter"]),
            "links (unit cables)": str(result["links"]),
            "bisection (links)": f"{result['bisection_links']:g}",
            "bisection bandwidth": f"{result['bisection'] / 1e9:,.0f} GB/s",
        }


class BucketOverlapExplorer(Explorer):
    """DDP-style buckets: gradient all-reduces overlapped with the backward pass of a transformer."""

    figsize = (6.4, 2.8)
    n_tensors = 4 * 24  # 24 transformer layers, four weight matrices each

    def make_controls(self):
        return {
            "bucket_mib": log_slider("bucket MiB", 25.0, 1.0, 4096.0),
            "n_ranks": slider("ranks p", 16, 2, 1024),
            "bandwidth_gb_s": log_slider("link GB/s", 100.0, 5.0, 900.0),
            "overlap": widgets.Checkbox(value=True, description="overlap with backward"),
        }

    def compute(self, bucket_mib, n_ranks, bandwidth_gb_s, overlap):
        seconds, grad_bytes = transformer_gradients(self.n_tensors // 4)
        return bucketed_timeline(
            seconds,
            grad_bytes,
            bucket_mib * 2**20,
            n_ranks,
            alpha=10e-6,
            beta=1 / (bandwidth_gb_s * 1e9),
            overlap=overlap,
        )

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.compute_bars = [
            self.ax.add_patch(Rectangle((0, 0.6), 0, 0.8, color="#55a868", ec="white", lw=0.3))
            for _ in range(self.n_tensors)
        ]
        self.comm_bars = [
            self.ax.add_patch(Rectangle((0, -0.4), 0, 0.8, color="#4c72b0", ec="white", lw=0.5))
            for _ in range(self.n_tensors)
        ]
        self.end_line = self.ax.axvline(0, color="#c44e52", lw=1)
        self.ax.set_yticks([0, 1], ["all-reduce", "backward"])
        self.ax.set_xlabel("milliseconds from the start of backward")
        self.ax.set_ylim(-0.7, 1.7)

    def redraw(self, result):
        for bar, (start, end, _) in zip(self.compute_bars, result.compute, strict=False):
            bar.set_x(start * 1e3)
            bar.set_width((end - start) * 1e3)
        for index, bar in enumerate(self.comm_bars):
            visible = index < len(result.comm)
            bar.set_visible(visible)
            if visible:
                start, end, _ = result.comm[index]
                bar.set_x(start * 1e3)
                bar.set_width((end - start) * 1e3)
        self.end_line.set_xdata([result.step_seconds * 1e3] * 2)
        self.ax.set_xlim(0, result.step_seconds * 1e3 * 1.03)

    def readout_of(self, result):
        return {
            "buckets": str(len(result.buckets)),
            "backward": format_seconds(result.backward_seconds),
            "step (backward + exposed comm)": format_seconds(result.step_seconds),
            "exposed communication": format_seconds(result.exposed_comm_seconds),
        }
