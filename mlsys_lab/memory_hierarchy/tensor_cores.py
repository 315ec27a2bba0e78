"""Tensor cores: the BF16 GEMM ladder and FlashAttention-2, read from their H200 record and the bank model.

The CUDA-core SGEMM of section 8 reaches 91% of cuBLAS FP32, which is 50 TFLOP/s on the H200: 5% of the
989 TFLOP/s (dense BF16) its tensor cores offer. This module turns ``data/tensor_cores_h200.json`` (written
by ``benchmarks/tensor_cores.py``, which checks and times every kernel of
``kernels/memory_hierarchy/bf16_gemm.cu`` and ``flash_attention.cu``) into the tables lesson 04 shows, and
recomputes each kernel's shared-memory bank conflicts with the course's own bank model
(:func:`mlsys_lab.memory_hierarchy.simt.bank_conflict_degree`), on any machine.

* GEMM ladder, C = A Bᵀ in BF16 with FP32 accumulation: WMMA → ``mma.sync`` + ``ldmatrix`` → ``cp.async``
  3-stage pipeline with XOR-swizzled tiles → Hopper ``wgmma`` fed by TMA (producer/consumer warp groups).
* FlashAttention-2 forward (Dao 2023): a tile of Q stays in registers, K/V tiles stream through shared
  memory, an online softmax rescales the running output; QKᵀ and PV are BF16 ``mma.sync``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention
from mlsys_lab.memory_hierarchy.simt import bank_conflict_degree
from mlsys_lab.validation import check_array, check_bool, check_choice, check_finite, check_int, check_type

GEMM_STEPS = ("wmma", "mma_ldmatrix", "pipeline", "wgmma")
ATTENTION_VARIANTS = ("d64_full", "d64_causal", "d128_full", "d128_causal")
# The BF16 mma.sync exercise's block tile (BM, BN, BK): its launcher needs M, N multiples of 64 and K of 32.
BLOCK_TILE = (64, 64, 32)


@dataclass(frozen=True)
class KernelRow:
    """One kernel's evidence: speed against the vendor's best, and the resources that explain it."""

    name: str
    idea: str
    flop_per_s: float
    fraction_of_best: float  # of cuBLAS BF16 (GEMM) or PyTorch SDPA's flash kernel (attention), same run
    registers: int  # per thread
    smem_bytes_per_block: int
    occupancy: float  # resident warps / the SM's 64
    bank_passes: int  # shared-memory passes of the worst ldmatrix phase, from the course's bank model (1: none)

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_type("idea", self.idea, str)
        for label in ("flop_per_s", "fraction_of_best", "occupancy"):
            check_finite(label, getattr(self, label), low=0.0)
        for label in ("registers", "smem_bytes_per_block", "bank_passes"):
            check_int(label, getattr(self, label), low=0)


def passes_of_phases(words: np.ndarray) -> int:
    """The worst bank-conflict degree over phases of 32 four-byte word indices (shape (phases, 32))."""
    if check_array("words", words, ndim=(1, 2), kinds="iu").shape[-1] != 32:
        raise ValueError(f"words must be (phases, 32) word indices; got shape {np.shape(words)}")
    return int(np.max(bank_conflict_degree(words)))


def gemm_bank_passes(step: str) -> dict[str, int]:
    """Bank passes of a ladder step's ldmatrix reads and of its tile stores into shared memory (model)."""
    check_choice("step", step, GEMM_STEPS)
    return {"ldmatrix": passes_of_phases(bf16_gemm.ldmatrix_phase_words(step)),
            "tile_store": passes_of_phases(bf16_gemm.tile_store_words(step))}


def gemm_ladder(record: dict, size: str = "8192") -> list[KernelRow]:
    """The ladder's rows at ``size``³ (a key of ``record["gemm_timing"]``), in ladder order."""
    check_type("record", record, dict)
    timing = record["gemm_timing"]
    check_choice("size", size, tuple(timing))
    rows = []
    for step in GEMM_STEPS:
        measured, resources = timing[size]["steps"][step], record["gemm_resources"][step]
        rows.append(KernelRow(step, resources["idea"], measured["flop_per_s"], measured["fraction_of_cublas"],
                              resources["registers"], resources["smem_bytes_per_block"], resources["occupancy"],
                              gemm_bank_passes(step)["ldmatrix"]))
    return rows


def attention_rows(record: dict, seq: str = "4096") -> list[KernelRow]:
    """FlashAttention-2's rows at sequence length ``seq``, one per head dimension and masking."""
    check_type("record", record, dict)
    rows = []
    for variant in ATTENTION_VARIANTS:
        timing = record["attention_timing"][variant]
        check_choice("seq", seq, tuple(timing))
        measured, resources = timing[seq], record["attention_resources"][variant]
        head_dim = int(variant.split("_")[0][1:])
        rows.append(KernelRow(variant, f"batch {measured['batch']} x {measured['heads']} heads",
                              measured["flash"]["flop_per_s"], measured["fraction_of_sdpa"],
                              resources["registers"], resources["smem_bytes_per_block"], resources["occupancy"],
                              passes_of_phases(flash_attention.attention_ldmatrix_words(head_dim))))
    return rows


def attention_fraction_by_length(record: dict, variant: str) -> dict[int, float]:
    """Fraction of SDPA's flash kernel per sequence length, for one variant ("d128_causal", ...)."""
    check_type("record", record, dict)
    if "attention_timing" not in record:
        raise ValueError("record must be the tensor-core record (records.load('tensor_cores_h200'))")
    check_choice("variant", variant, ATTENTION_VARIANTS)
    return {int(seq): r["fraction_of_sdpa"] for seq, r in record["attention_timing"][variant].items()}


def gemm_intensity(n: int, element_bytes: int = 2) -> float:
    """FLOP/B of an n³ GEMM that reads A and B and writes C once: 2n³ / (3 n² e) = 2n / (3e)."""
    check_int("n", n, low=1)
    check_int("element_bytes", element_bytes, low=1)
    return 2.0 * n / (3.0 * element_bytes)


def launch_overhead_rows(record: dict, key: str = "launch_overhead") -> list[tuple[str, float, float | None]]:
    """(what, host seconds per call, seconds above a raw CuPy launch or None) for a raw ``cupy.RawKernel`` call,
    the course's packed driver launch and each launcher, from ``record[key]`` (medians over interleaved
    rounds, ``benchmarks/tensor_cores.py``)."""
    check_type("record", record, dict)
    check_type("key", key, str)
    if key not in record:
        raise ValueError(f"key must be one of the record's launch measurements "
                         f"({', '.join(k for k in record if k.startswith('launch_overhead'))}); got {key!r}")
    overhead = record[key]
    names = {"raw_cupy_launch_host_s": "raw cupy.RawKernel call",
             "packed_launch_host_s": "PackedLaunch (driver call)",
             "bf16_gemm_pipeline_host_s": "bf16_gemm(step='pipeline')",
             "bf16_gemm_wgmma_host_s": "bf16_gemm(step='wgmma')",
             "flash_attention_host_s": "flash_attention",
             "fused_softmax_rows_host_s": "fused softmax (section 6)"}
    above = overhead.get("above_raw", {})
    return [(label, float(overhead[name]), above.get(name)) for name, label in names.items() if name in overhead]


def attention_intensity(seq: int, head_dim: int, causal: bool, element_bytes: int = 2) -> float:
    """FLOP per HBM byte of attention that reads Q, K, V and writes O once (per batch and head: 4 N d e bytes,
    4 N² d FLOP, half of it when causal): N / e, or N / (2e) when causal. Independent of the head dimension."""
    check_int("element_bytes", element_bytes, low=1)
    flop = flash_attention.attention_flop(1, 1, seq, head_dim, causal)
    return flop / (4.0 * seq * head_dim * element_bytes)


@dataclass(frozen=True)
class RooflineDot:
    """A measured kernel placed on the BF16 roofline: its minimum-traffic intensity and achieved rate."""

    name: str
    intensity: float  # FLOP per HBM byte, minimum traffic
    flop_per_s: float
    vendor: bool  # cuBLAS or SDPA, the yardstick, rather than one of the course's kernels

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_finite("intensity", self.intensity, low=0.0, low_inclusive=False)
        check_finite("flop_per_s", self.flop_per_s, low=0.0)
        check_bool("vendor", self.vendor)


def roofline_dots(record: dict, gemm_size: str = "8192", seq: str = "4096") -> list[RooflineDot]:
    """The ladder at ``gemm_size``³ with cuBLAS BF16, and attention (head dimension 128) at ``seq`` with SDPA."""
    check_type("record", record, dict)
    check_choice("gemm_size", gemm_size, tuple(record.get("gemm_timing", ())))
    check_choice("seq", seq, tuple(record.get("attention_timing", {}).get("d128_full", ())))
    n = int(gemm_size)
    dots = [RooflineDot(f"{r.name}", gemm_intensity(n), r.flop_per_s, False) for r in gemm_ladder(record, gemm_size)]
    dots.append(RooflineDot("cuBLAS BF16", gemm_intensity(n),
                            record["gemm_timing"][gemm_size]["cublas_bf16"]["best_flop_per_s"], True))
    for variant, causal in (("d128_full", False), ("d128_causal", True)):
        measured = record["attention_timing"][variant][seq]
        intensity = attention_intensity(int(seq), 128, causal)
        label = "causal" if causal else "full"
        dots.append(RooflineDot(f"flash attention, {label}", intensity, measured["flash"]["flop_per_s"], False))
        dots.append(RooflineDot(f"SDPA flash, {label}", intensity, measured["sdpa_flash"]["flop_per_s"], True))
    return dots


def mma_shapes(a_bits, b_bits) -> tuple[int, int, int]:
    """(M, N, K) of A (M, K) and B (N, K); ValueError naming both shapes unless they share K, M and N are positive
    multiples of 64 and K of 32 (the block tile, :data:`BLOCK_TILE`)."""
    for label, x in (("a_bits", a_bits), ("b_bits", b_bits)):
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2:
            raise ValueError(f"{label} must be a 2-D array of BF16 bits (uint16); got {type(x).__name__} "
                             f"of shape {shape}")
    (m, k), (n, k_b) = a_bits.shape, b_bits.shape
    bm, bn, bk = BLOCK_TILE
    if k != k_b or min(m, n, k) < 1 or m % bm or n % bn or k % bk:
        raise ValueError(f"a_bits (M, K) and b_bits (N, K) must share K, with M and N positive multiples of {bm} "
                         f"and K of {bk}; got a_bits {tuple(a_bits.shape)} and b_bits {tuple(b_bits.shape)}")
    return int(m), int(n), int(k)
