"""The course's kernels measured on a GPU, each beside the time the roofline allows on that GPU's own
measured ceilings (``benchmarks/memory_gpu.py`` recorded both, same machine, same day)."""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.hardware import Hardware
from mlsys_lab.operators.cost import (
    OpCost,
    elementwise_cost,
    matmul_cost,
    reduction_cost,
    softmax_cost,
    time_lower_bound_seconds,
)


def measured_hardware(roofline_data: dict) -> Hardware:
    """The recorded GPU's ceilings as a :class:`Hardware`: copy bandwidth (read + write, CuPy), cuBLAS FP32 and
    FP16 matmul throughput, and the L2 and shared-memory read bandwidths. Memory capacity is not recorded (nan)."""
    ceilings, device = roofline_data["ceilings"], roofline_data["device"]
    return Hardware(
        name=f"{device['name']} as measured (copy, cuBLAS)",
        peak_flop_per_s={"fp32": ceilings["sgemm_cublas_fp32"]["flop_per_s"],
                         "fp16": ceilings["hgemm_cublas_fp16"]["flop_per_s"]},
        memory_bandwidth_bytes_per_s=ceilings["copy_cupy"]["bytes_per_s"],
        memory_bytes=float("nan"),
        cache_bandwidth_bytes_per_s={"L2": ceilings["l2_read"]["bytes_per_s"],
                                     "shared": ceilings["shared_read"]["bytes_per_s"]},
        source=f"benchmarks/memory_gpu.py, {device['date_utc']}",
    )


@dataclass(frozen=True)
class MeasuredKernel:
    """A kernel measured on a GPU, beside its roofline prediction on that GPU's measured ceilings."""

    name: str
    cost: OpCost
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

    Ceilings are the *measured* ones of the same run (:func:`measured_hardware`, FP32), so a point at 1.0 runs
    as fast as the best the machine showed. The SiLU chain counts 6 FLOP per element (multiply-add, negate,
    exp, add, divide, counted as in ``softmax_cost``).
    """
    ceilings = measured_hardware(roofline_data)
    fused = memory_data["fused"]
    rows = []
    if "error" not in fused:  # a section that failed on the GPU is left out, not invented
        softmax = softmax_cost(fused["softmax"]["rows"], fused["softmax"]["cols"])
        silu = elementwise_cost(fused["silu_affine"]["n"], flop_per_element=6, name="SiLU(a x + b)")
        rows += [
            ("fused softmax 16384x4096", softmax, fused["softmax"]["fused"]["median_s"]),
            ("unfused softmax (CuPy)", softmax, fused["softmax"]["unfused_cupy"]["median_s"]),
            ("fused SiLU(a x + b)", silu, fused["silu_affine"]["fused"]["median_s"]),
            ("unfused SiLU (CuPy)", silu, fused["silu_affine"]["unfused_cupy"]["median_s"]),
            ("sum reduction", reduction_cost(fused["sum"]["n"]), fused["sum"]["kernel"]["median_s"]),
        ]
    n = memory_data["sgemm"]["n"]
    for step in memory_data["sgemm"]["steps"]:
        if "error" not in step:
            rows.append((f"sgemm {step['step']}", matmul_cost(n, n, n), step["median_s"]))
    rows.append(("cuBLAS sgemm", matmul_cost(n, n, n), memory_data["sgemm"]["cublas"]["median_s"]))
    return [
        MeasuredKernel(name, cost, seconds, time_lower_bound_seconds(cost, ceilings, "fp32"))
        for name, cost, seconds in rows
    ]
