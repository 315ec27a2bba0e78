"""Checks for the exercises of 03_roofline: bound classification, the compute-bound batch, Little's law."""

from __future__ import annotations

import math

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.hardware import PRESETS
from mlsys_lab.units import BYTES_PER_DTYPE

HARDWARE = list(PRESETS.values())


def reference_bound(flop: float, n_bytes: float, peak_flops: float, bandwidth: float) -> str:
    return "memory" if flop / n_bytes < peak_flops / bandwidth else "compute"


def reference_compute_bound_batch(d_model: int, peak_flops: float, bandwidth: float, bytes_per_element: int):
    """Smallest batch b with 2 b d^2 / (e (2 b d + d^2)) >= peak / bandwidth, or None if no b reaches it."""
    ridge = peak_flops / bandwidth
    e, d = bytes_per_element, d_model
    if d <= ridge * e:  # the intensity tends to d / e as b grows: never reaches the ridge
        return None
    b = max(1, math.ceil(ridge * e * d / (2 * (d - ridge * e))))

    def intensity(batch):
        return 2 * batch * d * d / (e * (2 * batch * d + d * d))

    while b > 1 and intensity(b - 1) >= ridge:  # guard against rounding of the closed form
        b -= 1
    while intensity(b) < ridge:
        b += 1
    return b


def reference_loads_in_flight(
    bandwidth: float, latency: float, n_sms: int, threads_per_sm: int, bytes_per_load: int
) -> int:
    """Little's law: bytes in flight = bandwidth x latency, shared by n_sms x threads_per_sm threads."""
    return math.ceil(bandwidth * latency / (n_sms * threads_per_sm * bytes_per_load))


def check_classify_bound(fn) -> None:
    """``fn(flop, n_bytes, peak_flops, bandwidth)`` -> "memory" or "compute"."""
    cases = [
        Case("c = a + b, 1e6 fp32, H200", (1e6, 12e6, 67e12, 4.8e12), expected="memory"),
        Case("4096^3 fp32 matmul, H200", (2 * 4096**3, 12 * 4096**2, 67e12, 4.8e12), expected="compute"),
    ]
    g = rng()
    for _ in range(12):
        hw = HARDWARE[int(g.integers(len(HARDWARE)))]
        dtype = list(hw.peak_flop_per_s)[int(g.integers(len(hw.peak_flop_per_s)))]
        m, n, k = (int(v) for v in g.integers(1, 8192, size=3))
        e = BYTES_PER_DTYPE[dtype]
        flop, n_bytes = 2.0 * m * n * k, float(e * (m * k + k * n + m * n))
        args = (flop, n_bytes, hw.peak(dtype), hw.memory_bandwidth_bytes_per_s)
        cases.append(Case(f"matmul {m}x{n}x{k} {dtype} on {hw.name}", args, expected=reference_bound(*args)))
    check("classify_bound", fn, cases)


def check_compute_bound_batch(fn) -> None:
    """``fn(d_model, peak_flops, bandwidth, bytes_per_element)`` -> smallest compute-bound batch, or None."""
    cases = [
        Case(
            "d=8192, H200 bf16",
            (8192, 989.5e12, 4.8e12, 2),
            expected=reference_compute_bound_batch(8192, 989.5e12, 4.8e12, 2),
        ),
        Case("d=128, H200 bf16 (never)", (128, 989.5e12, 4.8e12, 2), expected=None),
    ]
    g = rng()
    for _ in range(10):
        hw = HARDWARE[int(g.integers(len(HARDWARE)))]
        dtype = list(hw.peak_flop_per_s)[int(g.integers(len(hw.peak_flop_per_s)))]
        e = BYTES_PER_DTYPE[dtype]
        d = int(g.choice([256, 1024, 2048, 4096, 5120, 8192, 12288, 16384]))
        args = (d, hw.peak(dtype), hw.memory_bandwidth_bytes_per_s, e)
        cases.append(Case(f"d={d}, {hw.name} {dtype}", args, expected=reference_compute_bound_batch(*args)))
    check("compute_bound_batch", fn, cases)


def check_loads_in_flight(fn) -> None:
    """``fn(bandwidth, latency, n_sms, threads_per_sm, bytes_per_load)`` -> loads in flight per thread."""
    cases = [
        Case(
            "4.8 TB/s, 600 ns, 132 SMs x 2048 threads, float4",
            (4.8e12, 600e-9, 132, 2048, 16),
            expected=reference_loads_in_flight(4.8e12, 600e-9, 132, 2048, 16),
        )
    ]
    g = rng()
    for _ in range(10):
        args = (
            float(g.uniform(1e12, 8e12)),
            float(g.uniform(300e-9, 1200e-9)),
            int(g.integers(60, 160)),
            int(g.choice([256, 512, 1024, 2048])),
            int(g.choice([4, 8, 16])),
        )
        cases.append(
            Case(
                f"bw={args[0]:.3g}, t={args[1]:.3g}, {args[2]} SMs x {args[3]}, {args[4]} B",
                args,
                expected=reference_loads_in_flight(*args),
            )
        )
    check("loads_in_flight", fn, cases)
