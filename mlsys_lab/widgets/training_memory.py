"""06 training memory: where do the bytes of one training step go, and which GPU holds them?"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from mlsys_lab.hardware import H100_SXM, H200
from mlsys_lab.training_memory.accounting import (
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    TRANSFORMER_SHAPES,
    transformer_training_bytes,
)
from mlsys_lab.units import format_bytes
from mlsys_lab.widgets.base import Explorer, slider

PARTS = ("weights", "gradients", "master weights", "optimizer state", "activations")
COLORS = ("#4c72b0", "#dd8452", "#8172b3", "#c44e52", "#55a868")
GPUS = (H200, H100_SXM)  # A100 80GB has the H100's 80 GB: one line stands for both


class TrainingMemoryExplorer(Explorer):
    """Model, batch, sequence, precision, optimizer → memory of a step, for each recompute choice."""

    figsize = (6.4, 3.6)

    def make_controls(self):
        return {
            "model": widgets.Dropdown(options=list(TRANSFORMER_SHAPES), value="Llama-2 7B",
                                      description="model"),
            "batch": slider("micro-batch", 1, 1, 64),
            "seq": widgets.Dropdown(options=[512, 1024, 2048, 4096, 8192, 16384], value=4096,
                                    description="sequence"),
            "precision": widgets.Dropdown(options=list(PRECISIONS), value="mixed", description="precision"),
            "optimizer": widgets.Dropdown(options=list(OPTIMIZERS), value="adam", description="optimizer"),
        }

    def compute(self, model, batch, seq, precision, optimizer):
        shape = TRANSFORMER_SHAPES[model]
        breakdowns = {mode: transformer_training_bytes(shape, batch, seq, precision, optimizer, mode)
                      for mode in RECOMPUTE}
        return {"shape": shape, "breakdowns": breakdowns}

    def draw(self, figure):
        self.ax = figure.add_subplot()
        x = np.arange(len(RECOMPUTE))
        self.bars = {part: self.ax.bar(x, np.zeros(len(x)), color=color, label=part, width=0.6)
                     for part, color in zip(PARTS, COLORS, strict=True)}
        self.lines = [self.ax.axhline(gpu.memory_bytes / 1e9, color="k", lw=1, ls=ls)
                      for gpu, ls in zip(GPUS, ("-", "--"), strict=True)]
        self.line_labels = [self.ax.text(-0.45, gpu.memory_bytes / 1e9,
                                         f"{gpu.name.split()[1]} {gpu.memory_bytes / 1e9:.0f} GB",
                                         va="bottom", ha="left", fontsize=8)
                            for gpu in GPUS]
        self.totals = [self.ax.text(i, 0, "", ha="center", va="bottom", fontsize=8) for i in x]
        self.ax.set_xticks(x, [f"recompute: {mode}" for mode in RECOMPUTE])
        self.ax.set_ylabel("GB per GPU (no sharding)")
        self.ax.legend(fontsize=7, loc="upper right")

    def redraw(self, result):
        bottoms = np.zeros(len(RECOMPUTE))
        for part in PARTS:
            heights = np.array([result["breakdowns"][mode].as_dict()[part] / 1e9 for mode in RECOMPUTE])
            for rect, bottom, height in zip(self.bars[part], bottoms, heights, strict=True):
                rect.set_y(bottom)
                rect.set_height(height)
            bottoms += heights
        # Clip the axis so that the smallest bar and the GPU lines stay readable; totals are written out.
        top = max(min(bottoms.max(), 4 * bottoms.min()), H200.memory_bytes / 1e9) * 1.15
        self.ax.set_ylim(0, top)
        for text, total in zip(self.totals, bottoms, strict=True):
            text.set_position((text.get_position()[0], min(total, top / 1.1)))
            text.set_text(format_bytes(total * 1e9) + (" ↑" if total > top else ""))
        shape = result["shape"]
        self.ax.set_title(f"{shape.name}: {shape.n_params / 1e9:.2f} B parameters", fontsize=10)

    def readout_of(self, result):
        shape, b = result["shape"], result["breakdowns"]
        states = b["none"].total - b["none"].activations
        rows = {"parameters": f"{shape.n_params / 1e9:.3g} B",
                "bytes per parameter (states)": f"{states / shape.n_params:.0f}",
                "weights+grads+optimizer": format_bytes(states)}
        for mode in RECOMPUTE:
            rows[f"activations, recompute {mode}"] = format_bytes(b[mode].activations)
        rows["total, no recompute"] = format_bytes(b["none"].total)
        # One replica's memory over one GPU's: the fewest H200s that could hold the step, and only if all of
        # it (states and activations) were split evenly over them. With no sharding every GPU holds it all.
        replica_gpus = int(np.ceil(b["none"].total / H200.memory_bytes))
        rows[f"H200s one replica fills (total ÷ {H200.memory_bytes / 1e9:.0f} GB, split evenly)"] = f"{replica_gpus}"
        rows["fits one H200 unsharded (every GPU holds everything)"] = "yes" if replica_gpus == 1 else "no"
        return rows
