"""10 parameter-efficient fine-tuning: does fine-tuning this model fit on this GPU?"""

from __future__ import annotations

import ipywidgets as widgets

from mlsys_lab.peft.accounting import BASE_BITS, LORA_TARGET_SETS, MODELS, peft_memory
from mlsys_lab.widgets.base import Explorer, slider

GPU_GB = {"24 GB (RTX 4090)": 24, "48 GB (A6000 / L40S)": 48, "80 GB (A100 / H100)": 80, "141 GB (H200)": 141}
PARTS = ("base weights", "LoRA weights", "LoRA gradients", "Adam states")
COLORS = ("#4c72b0", "#55a868", "#c44e52", "#8172b2")


class QLoRAMemoryExplorer(Explorer):
    """Model, LoRA rank and targets, base-weight format -> memory bars against a GPU's capacity."""

    figsize = (6.2, 3.6)

    def make_controls(self):
        return {"model": widgets.Dropdown(options=list(MODELS), value="LLaMA-65B", description="model"),
                "rank": slider("LoRA rank r", 64, 1, 256),
                "targets": widgets.Dropdown(options=list(LORA_TARGET_SETS), value="all linear layers",
                                            description="adapted"),
                "quantization": widgets.Dropdown(options=list(BASE_BITS), value="nf4+dq",
                                                 description="base as"),
                "gpu": widgets.Dropdown(options=list(GPU_GB), value="48 GB (A6000 / L40S)",
                                        description="GPU")}

    def compute(self, model, rank, targets, quantization, gpu):
        result = peft_memory(model, rank, targets, quantization)
        result["gpu_bytes"] = GPU_GB[gpu] * 1e9
        return result

    def draw(self, figure):
        self.ax = figure.add_subplot()
        self.bars = [self.ax.barh([0], [1], left=[1], color=c, label=p)[0]
                     for p, c in zip(PARTS, COLORS, strict=True)]
        self.full_bar = self.ax.barh([1], [1], color="#999999", label="full fine-tuning (12 B/param)")[0]
        self.capacity = self.ax.axvline(1, color="k", linestyle="--", label="GPU memory")
        self.ax.set_yticks([0, 1], ["LoRA / QLoRA", "full"])
        self.ax.set_xscale("log")
        self.ax.set_xlabel("GB (activations not included)")
        self.ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)

    def redraw(self, result):
        left = 0.0
        for bar, part in zip(self.bars, PARTS, strict=True):
            width = result["parts"][part] / 1e9
            bar.set_x(max(left, 1e-3))
            bar.set_width(width)
            left += width
        self.full_bar.set_width(result["full"] / 1e9)
        self.capacity.set_xdata([result["gpu_bytes"] / 1e9] * 2)
        total = sum(result["parts"].values()) / 1e9
        self.ax.set_xlim(0.5, max(result["full"] / 1e9, result["gpu_bytes"] / 1e9) * 1.5)
        full_gb = result["full"] / 1e9
        self.ax.set_title(f"{result['model'].name}: {total:.1f} GB with LoRA vs {full_gb:,.0f} GB full",
                          fontsize=10)

    def readout_of(self, result):
        total = sum(result["parts"].values())
        rows = {"trainable (LoRA) params": f"{result['n_lora'] / 1e6:,.1f} M",
                "share of the model": f"{100 * result['n_lora'] / result['model'].n_matrix_params:.3f} %"}
        rows.update({part: f"{result['parts'][part] / 1e9:.2f} GB" for part in PARTS})
        rows["total"] = f"{total / 1e9:.1f} GB"
        rows["fits"] = "yes" if total <= result["gpu_bytes"] else "no"
        rows["full fine-tuning"] = f"{result['full'] / 1e9:,.0f} GB"
        return rows

