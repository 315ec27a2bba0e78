"""09 fault tolerance: goodput against the checkpoint interval, and where the optimum sits."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.fault_tolerance.reliability import (
    cluster_mttf,
    daly_interval,
    expected_goodput,
    first_order_goodput,
    optimal_interval,
    young_daly_interval,
)
from mlsys_lab.fault_tolerance.simulate import simulate_goodput
from mlsys_lab.fault_tolerance.storage import burst_write_seconds, checkpoint_bytes, tiered_checkpoint
from mlsys_lab.units import DAY, format_duration
from mlsys_lab.validation import check_int
from mlsys_lab.widgets.base import Explorer, log_slider


class GoodputExplorer(Explorer):
    """Cluster size, per-GPU MTTF, checkpoint and restart cost → goodput over the checkpoint interval."""

    figsize = (6.4, 3.4)

    def make_controls(self):
        return {
            "n_gpus": log_slider("GPUs", 16384, 8, 200_000),
            "gpu_mttf_days": log_slider("MTTF per GPU (days)", 2000, 10, 50_000),
            "checkpoint_seconds": log_slider("checkpoint write (s)", 30, 0.5, 3600),
            "restart_seconds": log_slider("restart (s)", 300, 1, 7200),
        }

    def compute(self, n_gpus, gpu_mttf_days, checkpoint_seconds, restart_seconds):
        n = check_int("n_gpus", int(round(n_gpus)), low=1)
        mttf = cluster_mttf(gpu_mttf_days * DAY, n)
        young = young_daly_interval(checkpoint_seconds, mttf)
        grid = young * np.logspace(-1.2, 1.2, 121)
        points = young * np.logspace(-1.2, 1.2, 13)
        best = optimal_interval(checkpoint_seconds, mttf)
        return {
            "mttf": mttf, "young": young, "daly": daly_interval(checkpoint_seconds, mttf), "best": best,
            "grid": grid, "exact": expected_goodput(grid, checkpoint_seconds, restart_seconds, mttf),
            "first_order": first_order_goodput(grid, checkpoint_seconds, restart_seconds, mttf),
            "points": points,
            "simulated": simulate_goodput(points, checkpoint_seconds, restart_seconds, mttf, 4000, seed=0),
            "best_goodput": float(expected_goodput(best, checkpoint_seconds, restart_seconds, mttf)),
            "young_goodput": float(expected_goodput(young, checkpoint_seconds, restart_seconds, mttf)),
            "c_over_m": checkpoint_seconds / mttf,
        }

    def draw(self, figure):
        ax = self.ax = figure.add_subplot()
        self.exact_line, = ax.plot([], [], color="#4c72b0", label="exact model (Daly)")
        self.first_line, = ax.plot([], [], color="#999999", ls="--", label="first order (Young)")
        self.sim_dots, = ax.plot([], [], "o", color="#dd8452", ms=4, label="Monte-Carlo, 4,000 failures")
        self.young_line = ax.axvline(1, color="#55a868", ls=":", label="√(2CM)")
        self.best_line = ax.axvline(1, color="#c44e52", ls="-", lw=0.8, label="optimum")
        ax.set_xscale("log")
        ax.set_xlabel("checkpoint interval τ (seconds of work)")
        ax.set_ylabel("goodput")
        ax.legend(fontsize=7, loc="lower center")

    def redraw(self, result):
        self.exact_line.set_data(result["grid"], result["exact"])
        self.first_line.set_data(result["grid"], result["first_order"])
        self.sim_dots.set_data(result["points"], result["simulated"])
        self.young_line.set_xdata([result["young"]] * 2)
        self.best_line.set_xdata([result["best"]] * 2)
        self.ax.set_xlim(result["grid"][0], result["grid"][-1])
        top = max(float(result["exact"].max()), float(result["simulated"].max()))
        self.ax.set_ylim(max(0.0, top - 0.4), min(1.0, top + 0.05))
        title = f"cluster MTTF {format_duration(result['mttf'])}, C/M = {result['c_over_m']:.2g}"
        self.ax.set_title(title, fontsize=9)

    def readout_of(self, result):
        return {"cluster MTTF": format_duration(result["mttf"]),
                "Young √(2CM)": format_duration(result["young"]),
                "Daly (higher order)": format_duration(result["daly"]),
                "exact optimum": format_duration(result["best"]),
                "goodput at optimum": f"{result['best_goodput']:.1%}",
                "goodput at √(2CM)": f"{result['young_goodput']:.1%}"}


class CheckpointStorageExplorer(Explorer):
    """Model size, GPUs, store and local-tier bandwidth, interval → stall of direct vs tiered checkpoints."""

    figsize = (6.4, 2.8)
    LABELS = ("direct to the store (stall)", "to local SSD (stall)", "drain SSD → store (background)",
              "checkpoint interval")

    def make_controls(self):
        return {
            "n_params_billion": log_slider("parameters (billions)", 405, 1, 2000),
            "n_gpus": log_slider("GPUs (8 per node)", 16384, 8, 131072),
            "bytes_per_param": widgets.Dropdown(options=[12, 14, 16], value=14, description="bytes/param"),
            "store_gb_per_s": log_slider("store bandwidth (GB/s)", 2000, 10, 20000),
            "local_gb_per_s": log_slider("local SSD per node (GB/s)", 5, 0.5, 50),
            "interval_minutes": log_slider("interval (min)", 30, 1, 240),
        }

    def compute(self, n_params_billion, n_gpus, bytes_per_param, store_gb_per_s, local_gb_per_s,
                interval_minutes):
        n = check_int("n_gpus", int(round(n_gpus)), low=8)
        n_nodes = max(n // 8, 1)
        total = checkpoint_bytes(n_params_billion * 1e9, bytes_per_param)
        direct = burst_write_seconds(total, n_nodes, 50e9, store_gb_per_s * 1e9)  # 400 Gb/s NIC per node
        interval = interval_minutes * 60.0
        tier = tiered_checkpoint(total, n_nodes, local_gb_per_s * 1e9, store_gb_per_s * 1e9, interval)
        seconds = np.array([direct, tier["stall_seconds"], tier["drain_seconds"], interval])
        return {"total": total, "per_gpu": total / n, "seconds": seconds, **tier}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        colors = ["#c44e52", "#55a868", "#8172b2", "#999999"]
        self.bars = self.ax.barh(self.LABELS, [1, 1, 1, 1], color=colors)
        self.ax.set_xscale("log")
        self.ax.invert_yaxis()
        self.ax.set_xlabel("seconds")
        self.ax.tick_params(axis="y", labelsize=8)

    def redraw(self, result):
        for bar, value in zip(self.bars, result["seconds"], strict=True):
            bar.set_width(value)
        self.ax.set_xlim(result["seconds"].min() / 3, result["seconds"].max() * 3)
        verdict = "drain keeps up" if result["keeps_up"] else "drain is slower than the interval!"
        self.ax.set_title(f"{result['total'] / 1e12:.3g} TB per checkpoint: {verdict}", fontsize=9)

    def readout_of(self, result):
        return {"checkpoint": f"{result['total'] / 1e12:.3g} TB",
                "per GPU": f"{result['per_gpu'] / 1e6:.4g} MB",
                "stall, direct": format_duration(float(result["seconds"][0])),
                "stall, SSD tier": format_duration(result["stall_seconds"]),
                "store bandwidth the drain needs": f"{result['store_bytes_per_s_needed'] / 1e9:.3g} GB/s",
                "drain keeps up": "yes" if result["keeps_up"] else "no"}
