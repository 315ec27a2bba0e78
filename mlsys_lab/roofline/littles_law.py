"""Little's law: how much work must be in flight to reach a throughput, and the recorded sweeps that test it.

Little (1961), "A proof for the queuing formula L = lambda W", Operations Research: n = R x t. To sustain
throughput R with operations of latency t, n = R t operations must be in flight; with fewer, the
throughput is n / t. The launchers that measured the sweeps are in :mod:`mlsys_lab.kernels.roofline.littles_law`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.validation import check_array, check_finite, check_number, check_type


def _finite_positive(name: str, value) -> float:
    return check_finite(name, value, low=0, low_inclusive=False)


def inflight_required(throughput: float, latency: float) -> float:
    """Little's law n = R x t: operations (or bytes) that must be in flight to sustain ``throughput``.

    Units follow the inputs: bytes/s x s = bytes in flight; FMA/cycle x cycles = FMAs in flight.
    """
    return _finite_positive("throughput", throughput) * _finite_positive("latency", latency)


def throughput_with_inflight(inflight, latency: float, peak_throughput: float):
    """Little's law turned around: R = min(peak, n / t) for ``inflight`` operations in flight (vectorized)."""
    _finite_positive("latency", latency)
    _finite_positive("peak_throughput", peak_throughput)
    n = np.asarray(check_array("inflight", inflight, min_size=0), dtype=float)
    if np.any(~(n >= 0)):
        raise ValueError("inflight must be >= 0 operations (or bytes) in flight, with no NaN")
    result = np.minimum(peak_throughput, n / latency)
    return float(result) if result.ndim == 0 else result


def loaded_latency(inflight, throughput, fraction: float = 0.95) -> float:
    """The latency under load, n / R, at a sweep's knee: the point with the fewest in flight among those that
    reach ``fraction`` of the best throughput (same units as the sweep: bytes / (bytes/s) = s).

    An idle pointer chase measures one request alone; at the knee the memory system is nearly saturated and each
    request also waits in queues, so n / R there is the latency Little's law needs to size the work in flight.
    """
    check_array("inflight", inflight, ndim=1, finite=True)
    check_array("throughput", throughput, ndim=1, finite=True)
    check_number("fraction", fraction, low=0.0, high=1.0, low_inclusive=False)
    n, r = np.asarray(inflight, dtype=float), np.asarray(throughput, dtype=float)
    if n.shape != r.shape or n.ndim != 1 or n.size == 0:
        raise ValueError(f"inflight and throughput must be 1-D of the same length; got {n.shape} and {r.shape}")
    if np.any(~(n > 0)) or np.any(~(r > 0)):
        raise ValueError("inflight and throughput must be > 0 at every point")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction!r}")
    reaching = np.flatnonzero(r >= fraction * r.max())
    knee = reaching[np.argmin(n[reaching])]
    return float(n[knee] / r[knee])


@dataclass(frozen=True)
class LittleSweep:
    """A Little's-law sweep: work in flight against throughput, with the law's prediction."""

    label: str
    inflight: np.ndarray  # operations (or bytes) in flight per SM
    throughput: np.ndarray  # measured, per SM per cycle (or bytes/s for HBM)
    latency: float  # measured latency of one operation (cycles, or seconds for HBM)
    peak: float  # the throughput ceiling used by the prediction
    unit: str

    def __post_init__(self) -> None:
        check_type("label", self.label, str)
        check_type("unit", self.unit, str)
        for name in ("inflight", "throughput"):
            array = check_array(name, getattr(self, name), ndim=1, finite=True)
            if np.any(array < 0):
                raise ValueError(f"{name} must be >= 0 at every point")
        if np.shape(self.inflight) != np.shape(self.throughput):
            raise ValueError(f"throughput must have the shape of inflight {np.shape(self.inflight)}; got "
                             f"{np.shape(self.throughput)}")
        _finite_positive("latency", self.latency)
        _finite_positive("peak", self.peak)

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
    check_type("roofline_data", roofline_data, dict)
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
