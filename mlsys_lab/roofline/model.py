"""The roofline model and Little's law: how fast an operator can possibly run on given hardware.

Roofline (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 2009): a kernel doing ``flop`` operations while moving ``n_bytes``
between memory and the chip has arithmetic intensity I = flop / n_bytes (FLOP/byte) and attains at
most

    P(I) = min(T_peak, I x beta)        T_peak: peak FLOP/s, beta: memory bandwidth (bytes/s).

The bytes are *memory traffic*: a value read into cache once and reused costs its bytes once.
The ridge point I* = T_peak / beta divides memory-bound (I < I*) from compute-bound (I > I*)
kernels. A hierarchical roofline draws one slanted roof per level (HBM, L2, shared memory), each
with the intensity measured against that level's traffic.

Little's law (Little, "A proof for the queuing formula L = lambda W", Operations Research 1961):
n = R x t. To sustain throughput R with operations of latency t, n = R t operations must be in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.units import bytes_per_element
from mlsys_lab.validation import check_int, check_positive


# ------------------------------------------------------------------------------------- the roofline
def attainable_flops(intensity, peak_flops: float, bandwidth: float):
    """P = min(peak_flops, intensity x bandwidth) in FLOP/s; ``intensity`` (FLOP/byte) may be an array."""
    check_positive("peak_flops", peak_flops)
    check_positive("bandwidth", bandwidth)
    intensity_array = np.asarray(intensity, dtype=float)
    if np.any(~(intensity_array > 0)):
        raise ValueError(f"intensity must be > 0 FLOP/byte; got {intensity!r}")
    result = np.minimum(peak_flops, intensity_array * bandwidth)
    return float(result) if result.ndim == 0 else result


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """I* = peak_flops / bandwidth (FLOP/byte): where the slanted roof meets the flat one."""
    return check_positive("peak_flops", peak_flops) / check_positive("bandwidth", bandwidth)


def hierarchical_attainable(
    intensities: dict[str, float], peak_flops: float, bandwidths: dict[str, float]
) -> float:
    """min(peak, min over levels of I_level x beta_level): each level's traffic caps the rate.

    ``intensities`` and ``bandwidths`` are keyed by level ("HBM", "L2", "shared"); every level in
    ``intensities`` needs a bandwidth.
    """
    missing = set(intensities) - set(bandwidths)
    if missing:
        raise ValueError(f"bandwidths must cover every level in intensities; missing {sorted(missing)}")
    return float(
        min(
            [check_positive("peak_flops", peak_flops)]
            + [attainable_flops(i, peak_flops, bandwidths[level]) for level, i in intensities.items()]
        )
    )


@dataclass(frozen=True)
class Cost:
    """An operator's work: FLOPs and minimal memory traffic in bytes."""

    flop: float
    n_bytes: float

    @property
    def intensity(self) -> float:
        """FLOP per byte of memory traffic."""
        return self.flop / self.n_bytes


def arithmetic_intensity(flop: float, n_bytes: float) -> float:
    """I = flop / n_bytes (FLOP/byte); ``n_bytes`` is memory traffic, not data size."""
    return check_positive("flop", flop) / check_positive("n_bytes", n_bytes)


def attainable_seconds(cost: Cost, peak_flops: float, bandwidth: float) -> float:
    """Roofline time max(flop / peak, n_bytes / bandwidth): the lower bound of the operator's run time."""
    check_positive("peak_flops", peak_flops)
    check_positive("bandwidth", bandwidth)
    return max(cost.flop / peak_flops, cost.n_bytes / bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """ "memory" when intensity < the ridge point, else "compute"."""
    return (
        "memory" if check_positive("intensity", intensity) < ridge_point(peak_flops, bandwidth) else "compute"
    )


# ------------------------------------------------------------------------------- operator costs
def _bytes(dtype: str) -> float:
    return bytes_per_element(dtype)


def matmul_cost(m: int, n: int, k: int, dtype: str = "fp32") -> Cost:
    """C (m, n) = A (m, k) @ B (k, n): 2 m n k FLOP; each matrix crosses memory once: (mk + kn + mn) bytes."""
    m, n, k = (check_int(name, v, low=1) for name, v in (("m", m), ("n", n), ("k", k)))
    return Cost(2.0 * m * n * k, float(_bytes(dtype) * (m * k + k * n + m * n)))


def elementwise_cost(
    n_elements: int, flop_per_element: float = 1.0, n_inputs: int = 1, n_outputs: int = 1, dtype: str = "fp32"
) -> Cost:
    """A fused elementwise map: ``flop_per_element`` FLOP each; inputs read once, outputs written once."""
    n_elements = check_int("n_elements", n_elements, low=1)
    check_int("n_inputs", n_inputs, low=0)
    check_int("n_outputs", n_outputs, low=1)
    return Cost(
        float(flop_per_element) * n_elements, float(_bytes(dtype) * n_elements * (n_inputs + n_outputs))
    )


def softmax_cost(rows: int, cols: int, dtype: str = "fp32") -> Cost:
    """Row softmax, fused: 5 FLOP per element (max, subtract, exp, add, scale); read x once, write y once.

    Counting exp as one FLOP is a convention: on a GPU it is one special-function instruction.
    """
    return elementwise_cost(check_int("rows", rows, low=1) * check_int("cols", cols, low=1), 5.0, 1, 1, dtype)


def reduction_cost(n_elements: int, dtype: str = "fp32") -> Cost:
    """Sum of n elements: n - 1 additions (counted as n), n elements read, one written (negligible)."""
    n_elements = check_int("n_elements", n_elements, low=1)
    return Cost(float(n_elements), float(_bytes(dtype) * n_elements))


def matmul_tile_traffic(m: int, n: int, k: int, tile_m: int, tile_n: int, dtype: str = "fp32") -> float:
    """Bytes a tiled matmul moves when each block loads a tile_m x k strip of A and a k x tile_n strip of B.

    A is read n / tile_n times and B m / tile_m times (no reuse across blocks), C written once:
    bytes = b (m k n / tile_n + k n m / tile_m + m n). Larger tiles raise the intensity.
    """
    b = _bytes(dtype)
    for name, v in (("m", m), ("n", n), ("k", k), ("tile_m", tile_m), ("tile_n", tile_n)):
        check_int(name, v, low=1)
    return float(b * (m * k * (n / tile_n) + k * n * (m / tile_m) + m * n))


# ---------------------------------------------------------------------------------- Little's law
def inflight_required(throughput: float, latency: float) -> float:
    """Little's law n = R x t: operations (or bytes) that must be in flight to sustain ``throughput``.

    Units follow the inputs: bytes/s x s = bytes in flight; FMA/cycle x cycles = FMAs in flight.
    """
    return check_positive("throughput", throughput) * check_positive("latency", latency)


def throughput_with_inflight(inflight, latency: float, peak_throughput: float):
    """Little's law turned around: R = min(peak, n / t) for ``inflight`` operations in flight (vectorized)."""
    check_positive("latency", latency)
    check_positive("peak_throughput", peak_throughput)
    result = np.minimum(peak_throughput, np.asarray(inflight, dtype=float) / latency)
    return float(result) if result.ndim == 0 else result


def roofline_curve(
    peak_flops: float, bandwidth: float, low: float = 1 / 16, high: float = 4096, points: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """(intensities, attainable FLOP/s) on a log grid from ``low`` to ``high`` FLOP/byte, for plotting."""
    check_int("points", points, low=2)
    intensities = np.geomspace(check_positive("low", low), check_positive("high", high), points)
    return intensities, attainable_flops(intensities, peak_flops, bandwidth)


@dataclass(frozen=True)
class MeasuredKernel:
    """A kernel measured on a GPU, beside its roofline prediction on that GPU's measured ceilings."""

    name: str
    cost: Cost
    seconds: float
    predicted_seconds: float

    @property
    def flop_per_s(self) -> float:
        return self.cost.flop / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.cost.n_bytes / self.seconds

    @property
    def fraction_of_roofline(self) -> float:
        """predicted / measured time: 1.0 means the kernel runs at its roof."""
        return self.predicted_seconds / self.seconds


def measured_kernels(roofline_data: dict, memory_data: dict) -> list[MeasuredKernel]:
    """The course's kernels measured on the GPU (``benchmarks/memory_gpu.py``), with their roofline times.

    Ceilings are the *measured* ones of the same run: copy bandwidth (read + write) and cuBLAS FP32
    SGEMM throughput, so a point at 1.0 runs as fast as the best the machine showed. The SiLU chain
    counts 6 FLOP per element (multiply-add, negate, exp, add, divide, counted as in ``softmax_cost``).
    """
    ceilings = roofline_data["ceilings"]
    bandwidth = ceilings["copy_cupy"]["bytes_per_s"]
    peak = ceilings["sgemm_cublas_fp32"]["flop_per_s"]
    fused = memory_data["fused"]
    rows = []
    if "error" not in fused:  # a section that failed on the GPU is left out, not invented
        softmax = softmax_cost(fused["softmax"]["rows"], fused["softmax"]["cols"])
        rows += [
            ("fused softmax 16384x4096", softmax, fused["softmax"]["fused"]["median_s"]),
            ("unfused softmax (CuPy)", softmax, fused["softmax"]["unfused_cupy"]["median_s"]),
            ("fused SiLU(a x + b)", elementwise_cost(fused["silu_affine"]["n"], 6.0),
             fused["silu_affine"]["fused"]["median_s"]),
            ("unfused SiLU (CuPy)", elementwise_cost(fused["silu_affine"]["n"], 6.0),
             fused["silu_affine"]["unfused_cupy"]["median_s"]),
            ("sum reduction", reduction_cost(fused["sum"]["n"]), fused["sum"]["kernel"]["median_s"]),
        ]
    n = memory_data["sgemm"]["n"]
    for step in memory_data["sgemm"]["steps"]:
        if "error" not in step:
            rows.append((f"sgemm {step['step']}", matmul_cost(n, n, n), step["median_s"]))
    rows.append(("cuBLAS sgemm", matmul_cost(n, n, n), memory_data["sgemm"]["cublas"]["median_s"]))
    return [
        MeasuredKernel(name, cost, seconds, attainable_seconds(cost, peak, bandwidth))
        for name, cost, seconds in rows
    ]


@dataclass(frozen=True)
class LittleSweep:
    """A Little's-law sweep: work in flight against throughput, with the law's prediction."""

    label: str
    inflight: np.ndarray  # operations (or bytes) in flight per SM
    throughput: np.ndarray  # measured, per SM per cycle (or bytes/s for HBM)
    latency: float  # measured latency of one operation (cycles, or seconds for HBM)
    peak: float  # the throughput ceiling used by the prediction
    unit: str

    @property
    def predicted(self) -> np.ndarray:
        return throughput_with_inflight(self.inflight, self.latency, self.peak)


def littles_law_sweeps(roofline_data: dict) -> list[LittleSweep]:
    """The three recorded sweeps (HBM loads, FP32 FMAs, tensor-core MMAs) as :class:`LittleSweep`.

    HBM: bytes in flight on the whole GPU vs bytes/s, latency from the pointer chase (seconds), peak the
    best read bandwidth seen. FMA: FMAs in flight per SM vs FMAs per cycle per SM (from clock64), latency
    one dependent step (cycles), peak 128 lanes per SM (Hopper: 4 schedulers x 32). MMA: mma.sync in
    flight per SM vs MMAs per cycle per SM, peak the best seen.
    """
    law = roofline_data["littles_law"]
    hbm = law["hbm_inflight_sweep"]
    sweeps = [
        LittleSweep(
            "HBM loads",
            np.array([r["bytes_in_flight"] for r in hbm], dtype=float),
            np.array([r["bytes_per_s"] for r in hbm]),
            law["chase_hbm"]["latency_s"],
            max(r["bytes_per_s"] for r in hbm),
            "bytes/s",
        )
    ]
    ffma = law["ffma_sweep"]
    one = next(r for r in ffma if r["chains"] == 1 and r["warps_per_sm"] == 1)
    sweeps.append(
        LittleSweep(
            "FP32 FMA",
            np.array([32.0 * r["warps_per_sm"] * r["chains"] for r in ffma]),
            np.array([32.0 * r["warps_per_sm"] * r["chains"] / r["cycles_per_iter"] for r in ffma]),
            one["cycles_per_iter"],
            128.0,
            "FMA/cycle/SM",
        )
    )
    mma = law["mma_sweep"]
    one = next(r for r in mma if r["chains"] == 1 and r["warps_per_sm"] == 1)
    rates = np.array([r["warps_per_sm"] * r["chains"] / r["cycles_per_iter"] for r in mma])
    sweeps.append(
        LittleSweep(
            "tensor-core mma.sync",
            np.array([float(r["warps_per_sm"] * r["chains"]) for r in mma]),
            rates,
            one["cycles_per_iter"],
            float(rates.max()),
            "MMA/cycle/SM",
        )
    )
    return sweeps
