"""Hopper's attention forward and backward and the FP8 block-scaled GEMM, as recorded, in the tables lesson 04 shows.

``data/hopper_kernels_h200.json`` is written by ``benchmarks/hopper_kernels.py`` (which runs
``benchmarks/attention_backward.py``'s rows too, so that one run holds all three kernels); it checks every kernel of
``kernels/memory_hierarchy/flash_attention_hopper.cu``, ``flash_attention_hopper_backward.cu`` and
``fp8_block_gemm.cu`` against its reference and time it with CUDA events beside its anchor, in the same process:

* attention (B 4, 2048 / d heads, BF16): the course's FlashAttention-2 kernel (the step before), the Hopper
  kernel with and without each change, and PyTorch's ``scaled_dot_product_attention`` with its flash
  (FlashAttention-2) and cuDNN backends;
* the attention backward (dQ, dK, dV) at the same shapes beside SDPA's flash and cuDNN backwards;
* the FP8 GEMM at 8192³: each block width, with and without promoting one K interval while the next runs, on a
  grid of one block per tile or a persistent one, the course's BF16 ``wgmma`` GEMM, and ``torch._scaled_mm``
  (cuBLASLt FP8, one scale per tensor, and per row).

Every ratio here is computed from the two times of one run (the kernels timed in interleaved rounds, so that the
GPU's clock changes hit all of them alike); none is typed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mlsys_lab.kernels.memory_hierarchy import bf16_gemm
from mlsys_lab.memory_hierarchy.tensor_cores import passes_of_phases
from mlsys_lab.validation import check_bool, check_choice, check_int, check_number, check_type

RECORD = "hopper_kernels_h200"  # the forward and FP8 kernels (benchmarks/hopper_kernels.py)
BACKWARD_RECORD = RECORD  # the backward, timed in the same run (benchmarks/attention_backward.py alone: its own)
ATTENTION_KERNELS = ("fa2_course", "hopper_default", "sdpa_flash", "sdpa_cudnn")
BACKWARD_KERNELS = ("hopper_backward", "sdpa_flash", "sdpa_cudnn")
ATTENTION_LABELS = {"fa2_course": "FA-2 (ours)", "hopper_default": "Hopper (ours)", "sdpa_flash": "SDPA flash",
                    "sdpa_cudnn": "SDPA cuDNN",  # ours: mma.sync, then wgmma + TMA; SDPA flash is FlashAttention-2
                    "hopper_backward": "Hopper (ours)"}
DIRECTIONS = {"forward": ("attention", ATTENTION_KERNELS, "hopper_default"),  # record part, kernels, the course's
              "backward": ("attention_backward", BACKWARD_KERNELS, "hopper_backward")}
TARGET_OF_CUDNN = 0.9  # the forward's target: 90% of cuDNN at sequence 4096 and 16384, d = 128
TARGET_BACKWARD_OF_CUDNN = 0.6  # the backward's: 60% of cuDNN's backward at sequence 4096, d = 128
TARGET_OF_SCALED_MM = 0.7  # the FP8 GEMM's: 70% of torch._scaled_mm at 8192³


@dataclass(frozen=True)
class AttentionRow:
    """One shape of the attention benchmark: TFLOP/s of each kernel and the course kernel's share of cuDNN's."""

    head_dim: int
    causal: bool
    seq: int
    tflops: dict
    of_cudnn: float

    def __post_init__(self) -> None:
        check_choice("head_dim", self.head_dim, (64, 128))
        check_bool("causal", self.causal)
        check_int("seq", self.seq, low=1)
        check_type("tflops", self.tflops, dict)
        check_number("of_cudnn", self.of_cudnn, low=0.0, low_inclusive=False, high=100.0)

    @property
    def label(self) -> str:
        return f"d {self.head_dim:3d} {'causal' if self.causal else 'full  '} {self.seq:5d}"


def _rate(entry) -> float | None:
    return entry["flop_per_s"] / 1e12 if isinstance(entry, dict) and "flop_per_s" in entry else None


def attention_vs_cudnn(record: dict, direction: str = "forward") -> list[AttentionRow]:
    """Every timed shape of the forward or the backward, d 128 first: TFLOP/s per kernel (None where it was not
    timed) and the course's Hopper kernel's fraction of cuDNN's, recomputed from the two median times. Backward
    FLOPs are counted as the FlashAttention papers count them: 2.5x the forward's."""
    check_type("record", record, dict)
    part, kernels, ours = DIRECTIONS[check_choice("direction", direction, tuple(DIRECTIONS))]
    rows = []
    for key, row in record[part].items():
        dims, mask, seq = key.split("_")
        rates = {name: _rate(row.get(name)) for name in kernels}
        rows.append(AttentionRow(int(dims[1:]), mask == "causal", int(seq), rates,
                                 row["sdpa_cudnn"]["median_s"] / row[ours]["median_s"]))
    return sorted(rows, key=lambda r: (-r.head_dim, r.causal, r.seq))


def attention_steps(record: dict, key: str = "d128_full_4096") -> dict[str, float]:
    """TFLOP/s of each Hopper variant timed at one shape ("hopper_<variant>"), and of the FA-2 kernel before it."""
    row = check_type("record", record, dict)["attention"][check_choice("key", key, tuple(record["attention"]))]
    return {name.removeprefix("hopper_"): _rate(entry) for name, entry in row.items()
            if name.startswith("hopper_") or name == "fa2_course"}


def fp8_rows(record: dict) -> list[tuple[str, float, float]]:
    """(kernel, TFLOP/s, fraction of ``torch._scaled_mm`` per tensor) at the recorded size, the anchors last."""
    row = check_type("record", record, dict)["fp8_8192"]
    anchor = row["scaled_mm"]["per_tensor"]["median_s"]
    out = [(name, _rate(entry), anchor / entry["median_s"]) for name, entry in row.items()
           if isinstance(entry, dict) and "median_s" in entry]
    for name, entry in row["scaled_mm"].items():
        if "median_s" in entry:
            out.append((f"torch._scaled_mm {name}", _rate(entry), anchor / entry["median_s"]))
    return out


def fp8_bound_use(record: dict) -> float:
    """The largest |C − Ĉ| / bound over every checked case of every FP8 variant (≤ 1: within the bound)."""
    check_type("record", record, dict)
    return max(case["max_error_over_bound"] for key, check in record.items() if key.startswith("fp8_check_")
               for case in check["cases"])


def operand_bank_passes() -> dict[str, int]:
    """Shared-memory passes of the worst 8-row phase of a ``wgmma`` operand read in the Hopper kernels, from the
    course's bank model. Every tile they read (Q, K, V, dO: 64 bf16 of a head a row; A and B of an FP8 K interval:
    128 codes a row) has rows of 128 bytes in TMA's 128-byte swizzle, the layout of the BF16 ladder's ``wgmma``
    step; "unswizzled" is the same read of the tile as TMA would copy it without the swizzle (1: conflict-free)."""
    swizzled = bf16_gemm.STEPS["wgmma"]
    plain = dataclasses.replace(swizzled, swizzled=False)
    return {"swizzled": passes_of_phases(bf16_gemm.ldmatrix_phase_words(swizzled)),
            "unswizzled": passes_of_phases(bf16_gemm.ldmatrix_phase_words(plain))}


def target_ratios(record: dict) -> list[tuple[str, float, float]]:
    """(what, measured fraction of its anchor, the course's target) for each target the record can speak to: the
    forward and the backward against cuDNN at d = 128 (every timed length and mask), the FP8 GEMM against
    ``torch._scaled_mm`` per tensor at 8192³. A record of one run gives all of them from one process."""
    check_type("record", record, dict)
    out = []
    for direction, target in (("forward", TARGET_OF_CUDNN), ("backward", TARGET_BACKWARD_OF_CUDNN)):
        if DIRECTIONS[direction][0] in record:
            out += [(f"{direction}, {'causal' if row.causal else 'full'} {row.seq}", row.of_cudnn, target)
                    for row in attention_vs_cudnn(record, direction) if row.head_dim == 128]
    if "fp8_8192" in record:
        fraction = dict((name, f) for name, _, f in fp8_rows(record))["course_default"]
        out.append(("FP8 GEMM 8192³", fraction, TARGET_OF_SCALED_MM))
    return out


def plot_attention(record: dict, head_dim: int = 128, ax=None, direction: str = "forward"):
    """Grouped bars: TFLOP/s of each kernel at every timed (mask, sequence) for one head dimension."""
    import matplotlib.pyplot as plt  # noqa: PLC0415  (plots only)

    kernels = DIRECTIONS[check_choice("direction", direction, tuple(DIRECTIONS))][1]
    rows = [r for r in attention_vs_cudnn(record, direction)
            if r.head_dim == check_choice("head_dim", head_dim, (64, 128))]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.6))
    elif not hasattr(ax, "bar"):
        raise TypeError(f"ax must be a matplotlib Axes or None; got {type(ax).__name__}")
    width = 0.8 / len(kernels)
    for i, name in enumerate(kernels):
        ax.bar([x + i * width for x in range(len(rows))], [r.tflops[name] or 0 for r in rows], width,
               label=ATTENTION_LABELS[name])
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))],
                  [f"{'causal' if r.causal else 'full'} {r.seq}" for r in rows])
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"attention {direction}, d = {head_dim}, BF16, {record['device']} ({record['date']})")
    ax.legend(fontsize=8, ncol=2)
    return ax
