"""Explorers for 08_parallelism: pipeline schedules, ZeRO memory, DDP overlap and the 3D planner."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from mlsys_lab.hardware import A100_80GB, H200
from mlsys_lab.parallelism.dp import ddp_timeline
from mlsys_lab.parallelism.planner import ClusterSpec, megatron_models, rank_plans
from mlsys_lab.parallelism.pp import peak_stashed_microbatches, pipeline_bubble_fraction, simulate_schedule
from mlsys_lab.parallelism.timeline import Event, stream_idle_fraction, timeline_raster, timeline_summary
from mlsys_lab.parallelism.zero import zero_communication_bytes, zero_memory_breakdown, zero_memory_per_gpu
from mlsys_lab.parallelism.zero_bubble import in_flight_peak, simulate_fbw, zb_h1_idle_formula, zb_h1_orders
from mlsys_lab.widgets.base import Explorer, log_slider, slider


def plot_timeline(ax, events: list[Event], streams: list[str] | None = None, title: str = "",
                  t_end: float | None = None, xlabel: str = "time") -> None:
    """Draw a timeline once (for static figures in the notebook); ``t_end`` aligns several panels."""
    streams = streams or sorted({e.stream for e in events})
    t_end = t_end or max(e.end for e in events)
    ax.imshow(timeline_raster(events, streams, t_end=t_end), aspect="auto", interpolation="nearest",
              extent=(0, t_end, len(streams) - 0.5, -0.5))
    ax.set_xlim(0, t_end)
    ax.set_yticks(range(len(streams)), streams)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)


class PipelineExplorer(Explorer):
    """Stages × time chart of GPipe, 1F1B, interleaved 1F1B and ZB-H1, with simulated and formula bubbles.

    ZB-H1 splits the backward of 2 into B = 1 and W = 1; its formula is the paper's (p − 1)(T_F + T_B − T_W)
    of idle per stage, as a share of the total, which the schedule attains for m ≥ p.
    """

    figsize = (7.5, 3.4)

    def make_controls(self):
        return {"schedule": widgets.Dropdown(options=["gpipe", "1f1b", "interleaved", "zb-h1"], value="1f1b",
                                             description="schedule"),
                "n_stages": slider("stages p", 4, 1, 8),
                "n_microbatches": slider("micro-batches m", 8, 1, 32),
                "n_chunks": slider("chunks v (interleaved)", 1, 1, 4)}

    def compute(self, schedule, n_stages, n_microbatches, n_chunks):
        if schedule == "zb-h1":
            orders = zb_h1_orders(n_stages, n_microbatches)
            events = simulate_fbw(orders, forward_s=1.0, input_grad_s=1.0, weight_grad_s=1.0)
            idle = zb_h1_idle_formula(n_stages)
            return {"events": events, "streams": [f"stage {d}" for d in range(n_stages)],
                    "measured": stream_idle_fraction(events), "formula": idle / (idle + 3 * n_microbatches),
                    "peak": [float(in_flight_peak(ops)) for ops in orders], "total": max(e.end for e in events)}
        if schedule != "interleaved":
            n_chunks = 1
        events = simulate_schedule(n_stages, n_microbatches, schedule, n_chunks)
        return {"events": events, "streams": [f"stage {d}" for d in range(n_stages)],
                "measured": stream_idle_fraction(events),
                "formula": pipeline_bubble_fraction(n_stages, n_microbatches, schedule, n_chunks),
                "peak": peak_stashed_microbatches(n_stages, n_microbatches, schedule, n_chunks),
                "total": max(e.end for e in events)}

    def draw(self, figure: Figure) -> None:
        self.ax = figure.add_subplot()
        self.artist = self.ax.imshow(np.ones((1, 2, 3)), aspect="auto", interpolation="nearest")
        self.ax.set_xlabel("time (one forward = 1, one backward = 2)")

    def redraw(self, result) -> None:
        streams, total = result["streams"], result["total"]
        self.artist.set_data(timeline_raster(result["events"], streams, t_end=total))
        self.artist.set_extent((0, total, len(streams) - 0.5, -0.5))
        self.ax.set_xlim(0, total)
        self.ax.set_ylim(len(streams) - 0.5, -0.5)
        self.ax.set_yticks(range(len(streams)), streams)
        self.ax.set_title(f"blue: forward, orange: backward (B), purple: W (zb-h1), white: bubble "
                          f"({result['measured']:.1%})", fontsize=10)

    def readout_of(self, result):
        peak = result["peak"]
        return {"bubble, simulated": f"{result['measured']:.2%}",
                "bubble, formula": f"{result['formula']:.2%}",
                "total time": f"{result['total']:.3g}",
                "peak stashed micro-batches (stage 0, last)": f"{peak[0]:.3g}, {peak[-1]:.3g}"}


class ZeroMemoryExplorer(Explorer):
    """Stacked bars of weights, gradients and optimizer states per GPU for ZeRO stages 0–3."""

    figsize = (6.4, 3.6)

    def make_controls(self):
        return {"n_params": log_slider("parameters Ψ", 7.5e9, 1e8, 1e12),
                "n_gpus": widgets.SelectionSlider(options=[2**i for i in range(11)], value=64,
                                                  description="data-parallel N_d",
                                                  style={"description_width": "initial"}),
                "gpu_memory_gb": slider("GPU memory (GB)", 80, 16, 192),
                "offload_optimizer": widgets.Checkbox(value=False, description="offload optimizer to CPU")}

    def compute(self, n_params, n_gpus, gpu_memory_gb, offload_optimizer):
        rows = [zero_memory_breakdown(n_params, n_gpus, s, offload_optimizer=offload_optimizer)
                for s in range(4)]
        comm = [zero_communication_bytes(n_params, n_gpus, s) for s in range(4)]
        return {"rows": rows, "comm": comm, "limit": gpu_memory_gb * 1e9,
                "ddp_bytes": zero_memory_per_gpu(n_params, n_gpus, 0)}

    def draw(self, figure: Figure) -> None:
        self.ax = figure.add_subplot()
        x = np.arange(4)
        self.bars = {}
        bottom = np.zeros(4)
        for name, color in (("params", "#4682b4"), ("grads", "#e67e22"), ("optimizer", "#8e44ad")):
            self.bars[name] = self.ax.bar(x, np.ones(4), bottom=bottom, color=color, label=name)
        self.limit = self.ax.axhline(80, color="#b00020", ls="--", label="GPU memory")
        self.ax.set_xticks(x, ["0 (DDP)", "1: P_os", "2: +g", "3: +p"])
        self.ax.set_ylabel("GB per GPU (model states)")
        self.ax.legend(fontsize=8, loc="upper right")

    def redraw(self, result) -> None:
        bottom = np.zeros(4)
        for name, bars in self.bars.items():
            heights = np.array([r[name] for r in result["rows"]]) / 1e9
            for bar, h, b in zip(bars, heights, bottom, strict=True):
                bar.set_height(h)
                bar.set_y(b)
            bottom += heights
        self.limit.set_ydata([result["limit"] / 1e9] * 2)
        self.ax.set_ylim(0, max(bottom.max(), result["limit"] / 1e9) * 1.1)

    def readout_of(self, result):
        out = {}
        base = result["ddp_bytes"]  # plain DDP, nothing offloaded
        for s, r in enumerate(result["rows"]):
            gpu = r["params"] + r["grads"] + r["optimizer"]
            fits = "fits" if gpu <= result["limit"] else "does not fit"
            out[f"stage {s}"] = (f"{gpu / 1e9:.3g} GB ({base / gpu:.3g}× less than plain DDP, {fits}); "
                                 f"comm {result['comm'][s] / result['comm'][0]:.2g}× DDP")
        out["on CPU (offload)"] = f"{result['rows'][3]['cpu_bytes'] / 1e9:.3g} GB at stage 3"
        return out


class DDPOverlapExplorer(Explorer):
    """Backward with bucketed all-reduce: how much communication stays exposed."""

    figsize = (7.5, 2.6)

    def make_controls(self):
        return {"bucket_mb": log_slider("bucket (MB)", 25, 1, 2000),
                "bandwidth_gb_s": log_slider("network (GB/s)", 50, 1, 450),
                "n_ranks": widgets.SelectionSlider(options=[2, 4, 8, 16, 64, 256], value=8,
                                                   description="ranks"),
                "overlap": widgets.Checkbox(value=True, description="overlap with backward")}

    def compute(self, bucket_mb, bandwidth_gb_s, n_ranks, overlap):
        # 24 layers of a 1.3B model in bf16: 110 MB of gradient and 2 ms of backward per layer (H200-ish)
        events = ddp_timeline([2e-3] * 24, [110e6] * 24, bucket_mb * 1e6, n_ranks, bandwidth_gb_s * 1e9,
                              overlap=overlap)
        return {"events": events, "summary": timeline_summary(events)}

    def draw(self, figure: Figure) -> None:
        self.ax = figure.add_subplot()
        self.artist = self.ax.imshow(np.ones((2, 2, 3)), aspect="auto", interpolation="nearest")
        self.ax.set_yticks([0, 1], ["compute", "comm"])
        self.ax.set_xlabel("seconds")

    def redraw(self, result) -> None:
        total = result["summary"]["total_s"]
        self.artist.set_data(timeline_raster(result["events"], ["compute", "comm"], t_end=total))
        self.artist.set_extent((0, total, 1.5, -0.5))
        self.ax.set_xlim(0, total)

    def readout_of(self, result):
        s = result["summary"]
        return {"backward": f"{s['compute_busy_s'] * 1e3:.3g} ms",
                "all-reduce": f"{s['comm_s'] * 1e3:.3g} ms",
                "exposed comm": f"{s['exposed_comm_s'] * 1e3:.3g} ms", "step": f"{s['total_s'] * 1e3:.3g} ms"}


class PlannerExplorer(Explorer):
    """The planner's best (dp, tp, pp, ZeRO, micro-batch) plans and where their step time goes."""

    figsize = (7.5, 3.6)
    n_shown = 6
    parts = (("compute", "#4682b4"), ("tp_comm", "#8e44ad"), ("p2p", "#7f8c8d"), ("bubble", "#bdc3c7"),
             ("dp_comm", "#e67e22"))

    def make_controls(self):
        models = megatron_models()
        return {"model": widgets.Dropdown(options=list(models), value="GPT 145.6B", description="model"),
                "gpu": widgets.Dropdown(options=["A100 80GB", "H200"], value="A100 80GB", description="GPU"),
                "n_nodes": slider("nodes (8 GPUs)", 64, 1, 384),
                "global_batch": slider("global batch", 1536, 64, 4096, 64),
                "network_gb_s": log_slider("network per GPU (GB/s)", 25, 1, 100),
                "efficiency": slider("GEMM efficiency", 0.47, 0.1, 1.0, 0.01)}

    def compute(self, model, gpu, n_nodes, global_batch, network_gb_s, efficiency):
        hw = A100_80GB if gpu.startswith("A100") else H200
        nvlink = max(v for k, v in hw.interconnect_bytes_per_s.items() if k.startswith("NVLink"))
        cluster = ClusterSpec(8 * n_nodes, 8, hw.memory_bytes, hw.peak("bf16"), nvlink, network_gb_s * 1e9)
        ranked = rank_plans(megatron_models()[model], cluster, global_batch, efficiency,
                            micro_batches=(1, 2, 4), zero_stages=(0, 1, 3))
        if not ranked:
            raise ValueError(f"no plan fits {model} on {8 * n_nodes} GPUs with global_batch={global_batch}: "
                             "add nodes or change the batch")
        return ranked[: self.n_shown]

    def draw(self, figure: Figure) -> None:
        self.ax = figure.add_subplot()
        y = np.arange(self.n_shown)
        self.bars = {name: self.ax.barh(y, np.zeros(self.n_shown), color=color, label=name)
                     for name, color in self.parts}
        self.ax.invert_yaxis()
        self.ax.set_xlabel("seconds per step")
        self.ax.legend(fontsize=7, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)

    def redraw(self, result) -> None:
        left = np.zeros(self.n_shown)
        for name, _ in self.parts:
            widths = np.array([e.seconds[name] for e in result] + [0.0] * (self.n_shown - len(result)))
            for bar, w, x0 in zip(self.bars[name], widths, left, strict=True):
                bar.set_width(w)
                bar.set_x(x0)
            left += widths
        labels = [f"d{e.plan.dp} t{e.plan.tp} p{e.plan.pp} z{e.plan.zero_stage} b{e.plan.micro_batch}"
                  for e in result] + [""] * (self.n_shown - len(result))
        self.ax.set_yticks(np.arange(self.n_shown), labels, fontsize=8)
        self.ax.set_xlim(0, left.max() * 1.05)

    def readout_of(self, result):
        best = result[0]
        plan = best.plan
        return {"best plan": f"DP {plan.dp} × TP {plan.tp} × PP {plan.pp}, ZeRO-{plan.zero_stage}, "
                             f"micro-batch {plan.micro_batch}",
                "step time": f"{best.seconds['total']:.3g} s",
                "TFLOP/s per GPU": f"{best.flop_per_s_per_gpu / 1e12:.3g}",
                "memory per GPU": f"{best.memory_bytes['total'] / 1e9:.3g} GB"}
