"""12 capstone: how a data-parallel step of the transformer should scale with ranks, and the runs' curves drawn."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from matplotlib.patches import Patch

from mlsys_lab.capstone.cost import dp_step_seconds, flops_per_token, gradient_bytes
from mlsys_lab.capstone.model import GPTConfig, count_params
from mlsys_lab.units import format_seconds
from mlsys_lab.validation import check_int
from mlsys_lab.widgets.base import Explorer, log_slider, slider


class DataParallelExplorer(Explorer):
    """Model size, global batch, ranks, compute rate and network → predicted step time: compute shrinks as 1/p,
    the ring all-reduce of the whole gradient does not."""

    figsize = (6.4, 3.4)

    def make_controls(self):
        return {
            "n_layers": slider("layers", 2, 1, 48),
            "d_model": widgets.Dropdown(options=[64, 128, 256, 512, 1024, 2048], value=64, description="width"),
            "batch_size": log_slider("sequences per step", 16, 1, 4096),
            "n_ranks": slider("ranks", 2, 1, 64),
            "gflop_per_s": log_slider("GFLOP/s per rank", 10, 0.1, 1e6),
            "alpha_us": log_slider("α per message (µs)", 8, 0.1, 1000),
            "gbyte_per_s": log_slider("bandwidth (GB/s)", 4.7, 0.1, 1000),
        }

    def compute(self, n_layers, d_model, batch_size, n_ranks, gflop_per_s, alpha_us, gbyte_per_s):
        config = GPTConfig(n_layers=check_int("n_layers", n_layers, low=1), d_model=d_model,
                           n_heads=max(d_model // 64, 1))
        batch = check_int("batch_size", int(round(batch_size)), low=1)
        ranks = np.arange(1, max(n_ranks, 2) * 2 + 1)
        rows = [dp_step_seconds(config, batch, int(p), gflop_per_s * 1e9, alpha_us * 1e-6, 1 / (gbyte_per_s * 1e9))
                for p in ranks]
        chosen = rows[n_ranks - 1]
        return {"ranks": ranks, "compute": np.array([r["compute_s"] for r in rows]),
                "allreduce": np.array([r["allreduce_s"] for r in rows]), "step": np.array([r["step_s"] for r in rows]),
                "chosen": chosen, "n_ranks": n_ranks, "one_rank": rows[0]["step_s"], "params": count_params(config),
                "grad_bytes": gradient_bytes(config), "flops": flops_per_token(config) * batch * config.context}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.lines = {name: self.ax.plot([], [], label=name, color=color)[0]
                      for name, color in (("compute", "#4c72b0"), ("all-reduce", "#dd8452"), ("step", "black"))}
        self.marker = self.ax.axvline(2, color="grey", ls=":")
        self.ax.set_xscale("log", base=2)
        self.ax.set_yscale("log")
        self.ax.set_xlabel("ranks")
        self.ax.set_ylabel("seconds per step")
        self.ax.legend(loc="upper right", fontsize=8)

    def redraw(self, result):
        for name, key in (("compute", "compute"), ("all-reduce", "allreduce"), ("step", "step")):
            self.lines[name].set_data(result["ranks"], np.maximum(result[key], 1e-12))
        self.marker.set_xdata([result["n_ranks"]] * 2)
        values = np.concatenate([result["compute"], result["allreduce"][1:], result["step"]])
        self.ax.set_xlim(1, result["ranks"][-1])
        self.ax.set_ylim(max(values[values > 0].min(), 1e-9) / 2, values.max() * 2)

    def readout_of(self, result):
        chosen = result["chosen"]
        return {"parameters": f"{result['params']:,}", "gradient all-reduced": f"{result['grad_bytes'] / 1e6:.3g} MB",
                "FLOPs per step": f"{result['flops']:.3g}", "compute per rank": format_seconds(chosen["compute_s"]),
                "all-reduce": format_seconds(chosen["allreduce_s"]),
                "communication share": f"{chosen['comm_share']:.0%}",
                "speed-up over 1 rank": f"{result['one_rank'] / chosen['step_s']:.2f}×"}


def plot_loss_curves(ax, curves: dict[str, list[float]], styles: dict[str, dict] | None = None,
                     first_step: dict[str, int] | None = None) -> None:
    """Training loss against step, one line per run (``first_step``: the step a resumed run's curve starts at)."""
    for label, losses in curves.items():
        start = (first_step or {}).get(label, 0)
        ax.plot(np.arange(start, start + len(losses)) + 1, losses, label=label, **(styles or {}).get(label, {}))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per character)")
    ax.legend(fontsize=8)


def plot_rank_seconds(ax, compute_s: list[float], allreduce_s: list[float], checkpoint_s: list[float]) -> None:
    """One horizontal bar per rank: its seconds computing, in the all-reduce (waiting included), checkpointing."""
    ranks = np.arange(len(compute_s))
    left = np.zeros(len(ranks))
    for values, label, color in ((compute_s, "compute", "#4c72b0"), (allreduce_s, "all-reduce (and waiting)",
                                                                     "#dd8452"),
                                 (checkpoint_s, "checkpoint writes", "#55a868")):
        ax.barh(ranks, values, left=left, label=label, color=color)
        left += np.asarray(values)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("seconds over the run")
    ax.legend(fontsize=8, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)


def plot_pipeline_timeline(ax, timeline: list[list]) -> None:
    """One row per rank (stage), one bar per op of the pipeline's step: forwards blue, backwards orange, the
    micro-batch's number in the bar; ``timeline[r]`` holds rank r's (kind, micro-batch, start, end) in seconds (the
    report of :func:`mlsys_lab.capstone.launch.run_pipeline`). The gaps are the bubble: a stage waiting."""
    colors = {"F": "#4c72b0", "B": "#dd8452"}
    for rank, ops in enumerate(timeline):
        for kind, microbatch, start, end in ops:
            ax.barh(rank, (end - start) * 1e3, left=start * 1e3, color=colors[kind], edgecolor="white")
            ax.text((start + end) / 2 * 1e3, rank, str(microbatch), ha="center", va="center", color="white",
                    fontsize=8)
    ax.set_yticks(range(len(timeline)), [f"rank {r} (stage {r})" for r in range(len(timeline))])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds into the step")
    ax.legend(handles=[Patch(color=c, label="forward" if k == "F" else "backward") for k, c in colors.items()],
              fontsize=8, ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)


def plot_ddp_timeline(ax, timeline: list[dict]) -> None:
    """Two rows per rank, its backward and its communication thread: one bar per layer's backward (blue) and per
    bucket's all-reduce (orange), labelled; ``timeline[r]`` is rank r's {"layers": [[name, start, end], ...],
    "buckets": [[label, start, end], ...]} in seconds (the report's ``ddp["timelines"]`` of
    :func:`mlsys_lab.capstone.launch.run_data_parallel` with ``ddp_buckets``). Orange under blue is the overlap."""
    colors = {"layers": "#4c72b0", "buckets": "#dd8452"}
    ticks = []
    for rank, rows in enumerate(timeline):
        for offset, key in enumerate(("layers", "buckets")):
            y = 2 * rank + offset
            ticks.append(f"rank {rank} " + ("backward" if key == "layers" else "all-reduce"))
            for label, start, end in rows[key]:
                ax.barh(y, (end - start) * 1e3, left=start * 1e3, color=colors[key], edgecolor="white")
                ax.text((start + end) / 2 * 1e3, y, label.split(":")[0], ha="center", va="center", color="white",
                        fontsize=7, clip_on=True)
    ax.set_yticks(range(len(ticks)), ticks)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds into the step")
    ax.legend(handles=[Patch(color=colors["layers"], label="a layer's backward"),
                       Patch(color=colors["buckets"], label="a bucket's all-reduce")],
              fontsize=8, ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
