"""Hardware records: datasheet presets and a probe of this machine's own ceilings.

Every lesson that predicts a time (roofline, collectives, parallelism) takes a :class:`Hardware`.
Peak FLOP/s are *dense* figures: NVIDIA datasheets print tensor-core numbers "with sparsity"
(2:4 structured), twice the dense rate; the course halves them and says so.
Bandwidths are bytes per second; interconnects are per direction unless the name says otherwise.
"""

from __future__ import annotations

import functools
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlsys_lab.validation import check_choice, check_finite, check_int, check_positive, check_type

TB = 1e12
GB = 1e9
GiB = 2**30
KiB = 2**10


@dataclass(frozen=True)
class Hardware:
    """One processor's ceilings. FLOP/s per dtype, bytes/s for memory and links, bytes for capacity."""

    name: str
    peak_flop_per_s: dict[str, float]  # dtype -> dense peak, e.g. {"fp32": 67e12, "bf16": 989e12}
    memory_bandwidth_bytes_per_s: float
    memory_bytes: float
    interconnect_bytes_per_s: dict[str, float] = field(default_factory=dict)  # per direction
    cache_bandwidth_bytes_per_s: dict[str, float] = field(default_factory=dict)  # "L2", "shared"
    source: str = ""
    # The SM array, for GPUs (None elsewhere): streaming multiprocessors, the most shared memory one SM can give
    # its blocks (bytes), and the compute capability (major, minor) that says which instructions it has.
    sm_count: int | None = None
    shared_memory_per_sm_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None

    def __post_init__(self):
        if not isinstance(self.peak_flop_per_s, dict) or not self.peak_flop_per_s:
            raise ValueError(f"peak_flop_per_s must be a non-empty dict dtype -> FLOP/s; got {self.peak_flop_per_s!r}")
        for dtype, flop_per_s in self.peak_flop_per_s.items():
            check_finite(f"peak_flop_per_s[{dtype!r}]", flop_per_s, low=0.0, low_inclusive=False)
        check_finite("memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s, low=0.0, low_inclusive=False)
        if not (isinstance(self.memory_bytes, float) and math.isnan(self.memory_bytes)):  # NaN: capacity unknown
            check_finite("memory_bytes", self.memory_bytes, low=0.0)
        check_type("name", self.name, str)
        check_type("source", self.source, str)
        for label in ("interconnect_bytes_per_s", "cache_bandwidth_bytes_per_s"):
            for link, rate in check_type(label, getattr(self, label), dict).items():
                check_finite(f"{label}[{link!r}]", rate, low=0.0, low_inclusive=False)
        for label in ("sm_count", "shared_memory_per_sm_bytes"):
            if getattr(self, label) is not None:
                check_int(label, getattr(self, label), low=1)
        if self.compute_capability is not None:
            cc = check_type("compute_capability", self.compute_capability, tuple)
            if len(cc) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cc):
                raise ValueError(f"compute_capability must be (major, minor), two integers >= 0; got {cc!r}")

    def peak(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s for ``dtype``."""
        check_choice("dtype", dtype, self.peak_flop_per_s, among=f"peak_flop_per_s of {self.name}")
        return self.peak_flop_per_s[dtype]

    def ridge_point(self, dtype: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns: peak / bandwidth."""
        return self.peak(dtype) / self.memory_bandwidth_bytes_per_s


# NVIDIA H200 SXM datasheet (nvidia.com/en-us/data-center/h200, 2024): 141 GB HBM3e at 4.8 TB/s;
# FP64 34, FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958* TFLOPS (* with sparsity: dense is half);
# NVLink 900 GB/s total = 450 GB/s each way; PCIe Gen5 128 GB/s total = 64 GB/s each way.
H200 = Hardware(
    name="NVIDIA H200 SXM",
    peak_flop_per_s={"fp64": 34 * TB, "fp32": 67 * TB, "tf32": 494.5 * TB, "bf16": 989.5 * TB,
                     "fp16": 989.5 * TB, "fp8": 1979 * TB},
    memory_bandwidth_bytes_per_s=4.8 * TB,
    memory_bytes=141 * GB,
    interconnect_bytes_per_s={"NVLink 4": 450 * GB, "PCIe 5 x16": 64 * GB, "InfiniBand NDR 400G": 50 * GB},
    source="NVIDIA H200 Tensor Core GPU datasheet (2024); tensor figures halved from 'with sparsity'",
    sm_count=132, shared_memory_per_sm_bytes=228 * KiB, compute_capability=(9, 0),
)

# NVIDIA H100 SXM5 datasheet (2023): 80 GB HBM3 at 3.35 TB/s; same SM array and clocks as H200.
H100_SXM = Hardware(
    name="NVIDIA H100 SXM",
    peak_flop_per_s={"fp64": 34 * TB, "fp32": 67 * TB, "tf32": 494.5 * TB, "bf16": 989.5 * TB,
                     "fp16": 989.5 * TB, "fp8": 1979 * TB},
    memory_bandwidth_bytes_per_s=3.35 * TB,
    memory_bytes=80 * GB,
    interconnect_bytes_per_s={"NVLink 4": 450 * GB, "PCIe 5 x16": 64 * GB, "InfiniBand NDR 400G": 50 * GB},
    source="NVIDIA H100 Tensor Core GPU datasheet (2023); tensor figures halved from 'with sparsity'",
    sm_count=132, shared_memory_per_sm_bytes=228 * KiB, compute_capability=(9, 0),
)

# NVIDIA A100 80GB SXM datasheet (2021): 2,039 GB/s HBM2e; FP64 9.7, FP32 19.5, TF32 156,
# BF16/FP16 312 TFLOPS dense; NVLink 3 600 GB/s total; PCIe Gen4 64 GB/s total.
A100_80GB = Hardware(
    name="NVIDIA A100 80GB SXM",
    peak_flop_per_s={"fp64": 9.7 * TB, "fp32": 19.5 * TB, "tf32": 156 * TB, "bf16": 312 * TB, "fp16": 312 * TB},
    memory_bandwidth_bytes_per_s=2.039 * TB,
    memory_bytes=80 * GB,
    interconnect_bytes_per_s={"NVLink 3": 300 * GB, "PCIe 4 x16": 32 * GB, "InfiniBand HDR 200G": 25 * GB},
    source="NVIDIA A100 Tensor Core GPU datasheet (2021)",
    sm_count=108, shared_memory_per_sm_bytes=164 * KiB, compute_capability=(8, 0),
)

# The GPUs Colab lends (free tier: T4; paid: L4, A100 40GB).
# SM arrays (all presets): SM counts from NVIDIA's whitepapers (Turing: T4 has 40 of the TU104's SMs, 2,560 CUDA
# cores; Ada: L4 has 58 SMs, 7,424 CUDA cores; Ampere: A100 108 SMs; Hopper: H100/H200 SXM5 132 SMs); shared memory
# per SM from the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": 64 KB on 7.5,
# 164 KB on 8.0, 100 KB on 8.6/8.9, 228 KB on 9.0. bf16 tensor cores, cp.async and bf16 mma.sync start at 8.0.
# NVIDIA A100 40GB SXM: as the 80GB part (same SMs and clocks) with HBM2 at 1,555 GB/s (A100 datasheet, 2021).
A100_40GB = Hardware(
    name="NVIDIA A100 40GB SXM",
    peak_flop_per_s={"fp64": 9.7 * TB, "fp32": 19.5 * TB, "tf32": 156 * TB, "bf16": 312 * TB, "fp16": 312 * TB},
    memory_bandwidth_bytes_per_s=1.555 * TB,
    memory_bytes=40 * GB,
    interconnect_bytes_per_s={"NVLink 3": 300 * GB, "PCIe 4 x16": 32 * GB},
    source="NVIDIA A100 Tensor Core GPU datasheet (2021), 40GB SXM column",
    sm_count=108, shared_memory_per_sm_bytes=164 * KiB, compute_capability=(8, 0),
)

# NVIDIA L4 datasheet (2023): 24 GB GDDR6 at 300 GB/s; FP32 30.3 TFLOPS; TF32 120*, BF16/FP16 242*,
# FP8 485* TFLOPS (* with sparsity: dense is half); PCIe Gen4 x16 64 GB/s total = 32 GB/s each way. Ada, sm_89.
L4 = Hardware(
    name="NVIDIA L4",
    peak_flop_per_s={"fp32": 30.3 * TB, "tf32": 60 * TB, "bf16": 121 * TB, "fp16": 121 * TB, "fp8": 242.5 * TB},
    memory_bandwidth_bytes_per_s=300 * GB,
    memory_bytes=24 * GB,
    interconnect_bytes_per_s={"PCIe 4 x16": 32 * GB},
    source="NVIDIA L4 Tensor Core GPU datasheet (2023); tensor figures halved from 'with sparsity'",
    sm_count=58, shared_memory_per_sm_bytes=100 * KiB, compute_capability=(8, 9),
)

# NVIDIA T4 datasheet (2019): 16 GB GDDR6 at 320 GB/s; FP32 8.1 TFLOPS; FP16 (tensor cores, FP32 accumulate)
# 65 TFLOPS; no bf16 (Turing, sm_75); PCIe Gen3 x16 32 GB/s total = 16 GB/s each way.
T4 = Hardware(
    name="NVIDIA T4",
    peak_flop_per_s={"fp32": 8.1 * TB, "fp16": 65 * TB},
    memory_bandwidth_bytes_per_s=320 * GB,
    memory_bytes=16 * GB,
    interconnect_bytes_per_s={"PCIe 3 x16": 16 * GB},
    source="NVIDIA T4 Tensor Core GPU datasheet (2019)",
    sm_count=40, shared_memory_per_sm_bytes=64 * KiB, compute_capability=(7, 5),
)

# A generic 8-core desktop CPU with AVX2: 8 cores x 3.0 GHz x 2 FMA units x 8 fp32 lanes x 2 FLOP
# = 768 GFLOP/s fp32 (half for fp64); dual-channel DDR4-3200: 2 x 25.6 GB/s = 51.2 GB/s.
GENERIC_CPU = Hardware(
    name="Generic 8-core AVX2 CPU",
    peak_flop_per_s={"fp64": 384 * GB, "fp32": 768 * GB},
    memory_bandwidth_bytes_per_s=51.2 * GB,
    memory_bytes=32 * GiB,
    source="derived: 8 cores x 3.0 GHz x 2 FMA x 8 lanes x 2 FLOP; DDR4-3200 dual channel",
)

PRESETS: dict[str, Hardware] = {hw.name: hw for hw in (H200, H100_SXM, A100_80GB, A100_40GB, L4, T4, GENERIC_CPU)}


def preset(name: str) -> Hardware:
    """Look a preset up by name (``PRESETS`` lists them)."""
    check_choice("name", name, PRESETS)
    return PRESETS[name]


def cpu_model() -> str:
    """This CPU's model name ("AMD EPYC 9654 ..."): /proc/cpuinfo on Linux, else what the platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclass(frozen=True)
class ProbeResult:
    """This machine's measured ceilings."""

    hardware: Hardware  # measured figures in the same record shape as the presets
    matmul_n: int
    copy_bytes: int
    backend: str

    def __post_init__(self) -> None:
        check_type("hardware", self.hardware, Hardware)
        check_int("matmul_n", self.matmul_n, low=1)
        check_int("copy_bytes", self.copy_bytes, low=1)
        check_type("backend", self.backend, str)

    def summary(self) -> str:
        hw = self.hardware
        flops = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in hw.peak_flop_per_s.items())
        return (f"{hw.name}: matmul {flops} (n={self.matmul_n}); copy "
                f"{hw.memory_bandwidth_bytes_per_s / 1e9:.3g} GB/s (read + write, {self.copy_bytes / 2**20:.0f} MiB)")


@functools.lru_cache(maxsize=4)
def probe(matmul_n: int | None = None, copy_mib: int | None = None) -> ProbeResult:
    """Measure this machine: matmul FLOP/s (2n³ per product, standard-normal operands) and copy bandwidth
    (bytes read + written).

    NumPy (BLAS) on a CPU, CuPy (cuBLAS, device copy) on a GPU; the median of timed runs after
    warm-up. The result is cached for the session: call ``probe.cache_clear()`` to measure again.
    """
    from mlsys_lab import backend
    from mlsys_lab.timing import benchmark

    xp = backend.xp
    gpu = backend.on_gpu
    matmul_n = check_int("matmul_n", matmul_n if matmul_n is not None else (8192 if gpu else 1024), low=64)
    copy_mib = check_int("copy_mib", copy_mib if copy_mib is not None else (1024 if gpu else 128), low=1)
    dtypes = {"fp32": xp.float32, "fp16": xp.float16} if gpu else {"fp32": xp.float32, "fp64": xp.float64}
    peaks = {}
    # Random operands, not ones: a GPU's power draw (and so its clock) depends on the bits it multiplies,
    # and matrices of ones flatter it (on the H200, fp16: 874 TFLOP/s with ones, about 750 with random data).
    rng = np.random.default_rng(0)
    for label, dtype in dtypes.items():
        a, b = (xp.asarray(rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)).astype(dtype)
                for _ in range(2))
        out = xp.empty_like(a)
        timing = benchmark(lambda a=a, b=b, out=out: xp.matmul(a, b, out=out), warmup=2, repeat=5 if not gpu else 20)
        peaks[label] = 2 * matmul_n**3 / timing.median
    n_elements = copy_mib * 2**20 // 4
    src = xp.ones(n_elements, dtype=xp.float32)
    dst = xp.empty_like(src)
    timing = benchmark(lambda: xp.copyto(dst, src), warmup=2, repeat=10)
    bandwidth = 2 * src.nbytes / timing.median
    measured = Hardware(
        name=f"this machine ({backend.describe().split(' · ')[1].removeprefix('device: ')}, {backend.name})",
        peak_flop_per_s=peaks,
        memory_bandwidth_bytes_per_s=bandwidth,
        memory_bytes=float("nan"),
        source="measured by mlsys_lab.hardware.probe()",
    )
    return ProbeResult(measured, matmul_n, src.nbytes, backend.name)


def transfer_seconds(n_bytes: float, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """Time to move ``n_bytes`` over a link: latency + n_bytes / bandwidth (the α-β model)."""
    n_bytes = check_finite("n_bytes", n_bytes, low=0)
    bandwidth_bytes_per_s = check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    latency_s = check_finite("latency_s", latency_s, low=0)
    return latency_s + n_bytes / bandwidth_bytes_per_s


def links_of(hw: Hardware) -> dict[str, float]:
    """Every data path of ``hw`` with its bandwidth (bytes/s): memory first, then interconnects."""
    check_type("hw", hw, Hardware)
    return {"memory (HBM/DRAM)": hw.memory_bandwidth_bytes_per_s, **hw.interconnect_bytes_per_s}


def recorded_probe(name: str = "probe_h200") -> Hardware:
    """A probe recorded on another machine (``mlsys_lab/data/<name>.json``), as a Hardware record."""
    from mlsys_lab import records

    record = records.load(name)
    return Hardware(name=f"{record['device'].split(' (')[0]}, measured {record['date']}",
                    peak_flop_per_s=record["peak_flop_per_s"],
                    memory_bandwidth_bytes_per_s=record["memory_bandwidth_bytes_per_s"],
                    memory_bytes=float("nan"), source=record["command"])
