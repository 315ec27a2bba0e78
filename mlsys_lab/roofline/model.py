"""The roofline model: how fast an operator can possibly run on given hardware.

Roofline (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 2009): a kernel doing ``flop`` operations while moving ``n_bytes``
between memory and the chip has arithmetic intensity I = flop / n_bytes (FLOP/byte) and attains at
most

    P(I) = min(T_peak, I x beta)        T_peak: peak FLOP/s, beta: memory bandwidth (bytes/s).

The bytes are *memory traffic*: a value read into cache once and reused costs its bytes once.
The ridge point I* = T_peak / beta divides memory-bound (I < I*) from compute-bound (I > I*)
kernels. A hierarchical roofline draws one slanted roof per level (HBM, L2, shared memory), each
with the intensity measured against that level's traffic.

The operators' costs (FLOPs, bytes, intensity, bound, roofline time) are lesson 01's
(:mod:`mlsys_lab.operators.cost`); this module draws the roofs and places those costs under them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.hardware import Hardware
from mlsys_lab.operators.cost import (
    OpCost,
    bound,
    elementwise_cost,
    matmul_cost,
    reduction_cost,
    softmax_cost,
    time_lower_bound_seconds,
)
from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_type


def _rate(name: str, value) -> float:
    """A peak or a bandwidth: a finite number > 0 (an infinite roof is no roof)."""
    return check_finite(name, value, low=0, low_inclusive=False)


def attainable_flops(intensity, peak_flops: float, bandwidth: float):
    """P = min(peak_flops, intensity x bandwidth) in FLOP/s; ``intensity`` (FLOP/byte) may be an array."""
    _rate("peak_flops", peak_flops)
    _rate("bandwidth", bandwidth)
    intensity_array = np.asarray(check_array("intensity", intensity, min_size=0), dtype=float)
    if np.any(~(intensity_array > 0)):
        raise ValueError(f"intensity must be > 0 FLOP/byte; got {intensity!r}")
    result = np.minimum(peak_flops, intensity_array * bandwidth)
    return float(result) if result.ndim == 0 else result


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """I* = peak_flops / bandwidth (FLOP/byte): where the slanted roof meets the flat one."""
    return _rate("peak_flops", peak_flops) / _rate("bandwidth", bandwidth)


def hierarchical_attainable(intensities: dict[str, float], peak_flops: float, bandwidths: dict[str, float]) -> float:
    """min(peak, min over levels of I_level x beta_level): each level's traffic caps the rate.

    ``intensities`` and ``bandwidths`` are keyed by level ("HBM", "L2", "shared"); every level in
    ``intensities`` needs a bandwidth.
    """
    check_type("intensities", intensities, dict)
    check_type("bandwidths", bandwidths, dict)
    missing = set(intensities) - set(bandwidths)
    if missing:
        raise ValueError(f"bandwidths must cover every level in intensities; missing {sorted(missing)}")
    return float(
        min(
            [_rate("peak_flops", peak_flops)]
            + [attainable_flops(i, peak_flops, bandwidths[level]) for level, i in intensities.items()]
        )
    )


def roofline_curve(
    peak_flops: float, bandwidth: float, low: float = 1 / 16, high: float = 4096, points: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """(intensities, attainable FLOP/s) on a log grid from ``low`` to ``high`` FLOP/byte, for plotting."""
    check_int("points", points, low=2, high=100_000)
    low, high = _rate("low", low), _rate("high", high)
    if high <= low:
        raise ValueError(f"high must be > low={low:g} FLOP/byte; got {high:g}")
    intensities = np.geomspace(low, high, points)
    return intensities, attainable_flops(intensities, peak_flops, bandwidth)


# ------------------------------------------------------------------------- an operator on a roofline
@dataclass(frozen=True)
class RooflinePoint:
    """One operator on one processor: where it sits under the roof, and the time the roof allows."""

    hardware: Hardware
    dtype: str
    cost: OpCost
    attainable_flops: float  # FLOP/s the roof allows at the operator's intensity (0 for no FLOPs)
    seconds: float  # roofline time: max(flop / peak, n_bytes / bandwidth)
    bound: str  # "memory-bound", "compute-bound" or "no work"

    def __post_init__(self) -> None:
        check_type("hardware", self.hardware, Hardware)
        check_type("dtype", self.dtype, str)
        check_type("cost", self.cost, OpCost)
        check_finite("attainable_flops", self.attainable_flops, low=0)
        check_finite("seconds", self.seconds, low=0)
        check_choice("bound", self.bound, ("memory-bound", "compute-bound", "no work"))

    @property
    def peak_flops(self) -> float:
        return self.hardware.peak(self.dtype)

    @property
    def bandwidth(self) -> float:
        return self.hardware.memory_bandwidth_bytes_per_s


def place(hardware: Hardware, cost: OpCost, dtype: str = "fp32") -> RooflinePoint:
    """Attainable FLOP/s, bound and roofline time of the operator ``cost`` on ``hardware`` in ``dtype``."""
    check_type("hardware", hardware, Hardware)
    check_type("cost", cost, OpCost)
    peak, bandwidth = hardware.peak(dtype), hardware.memory_bandwidth_bytes_per_s
    attainable = attainable_flops(cost.intensity, peak, bandwidth) if cost.intensity > 0 else 0.0
    return RooflinePoint(
        hardware, dtype, cost, attainable, time_lower_bound_seconds(cost, hardware, dtype), bound(cost, hardware, dtype)
    )


# The operators of the roofline explorer, sized by (m, n, k).
OPERATORS = ("matmul", "linear layer (batch x d)", "elementwise add", "softmax", "sum")


def operator_cost(operator: str, m: int, n: int, k: int, dtype: str = "fp32") -> OpCost:
    """The cost of one of ``OPERATORS`` with sizes m, n, k.

    matmul: (m, k) @ (k, n). linear layer: batch m through a d x d weight, d = n. elementwise add:
    m x n elements, two inputs. softmax: m rows of n. sum: m x n elements to one.
    """
    check_choice("operator", operator, OPERATORS)
    if operator == "matmul":
        return matmul_cost(m, n, k, dtype)
    if operator == "linear layer (batch x d)":
        return matmul_cost(m, n, n, dtype)
    if operator == "elementwise add":
        return elementwise_cost(m * n, n_inputs=2, dtype=dtype, name="add")
    if operator == "softmax":
        return softmax_cost(m, n, dtype)
    return reduction_cost(m * n, dtype=dtype)
