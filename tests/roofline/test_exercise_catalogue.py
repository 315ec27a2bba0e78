"""The lesson 03 checks, proved: the reference passes every seed, each plausible wrong answer fails every seed."""

from __future__ import annotations

import math

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises import roofline as ex
from mlsys_lab.timing import benchmark


# ------------------------------------------------------------------ classify_bound
def bound_with_rule(rule):
    """A wrong answer that decides each level's verdict by ``rule(intensity, peak, bandwidth)`` (True: memory)."""
    def fn(flop, traffic, peak, bandwidths):
        attainable, limiter = float(peak), "compute"
        for level, n_bytes in traffic.items():
            intensity = flop / n_bytes
            roof = min(peak, intensity * bandwidths[level])
            if rule(intensity, peak, bandwidths[level]) and roof <= attainable:
                attainable, limiter = roof, level
        return attainable, limiter
    return fn


def bound_hbm_only(flop, traffic, peak, bandwidths):
    roof = flop / traffic["HBM"] * bandwidths["HBM"]
    return (roof, "HBM") if roof < peak else (float(peak), "compute")


def bound_lowest_intensity(flop, traffic, peak, bandwidths):
    level = max(traffic, key=traffic.get)  # the most bytes: the lowest intensity, whatever its bandwidth
    roof = flop / traffic[level] * bandwidths[level]
    return (roof, level) if roof < peak else (float(peak), "compute")


def bound_total_traffic(flop, traffic, peak, bandwidths):
    total = sum(traffic.values())
    roof = flop / total * bandwidths["HBM"]
    return (roof, "HBM") if roof < peak else (float(peak), "compute")


def bound_max_of_roofs(flop, traffic, peak, bandwidths):
    roofs = {level: flop / n * bandwidths[level] for level, n in traffic.items()}
    level = max(roofs, key=roofs.get)
    return (roofs[level], level) if roofs[level] < peak else (float(peak), "compute")


CLASSIFY = Catalogue("classify_bound", ex.check_classify_bound, ex.reference_bound, {
    "ignores the hardware (ridge fixed at 10 FLOP/B)": bound_with_rule(lambda i, p, b: i < 10),
    "fixed threshold of 100 FLOP/B": bound_with_rule(lambda i, p, b: i < 100),
    "ridge off by 2x": bound_with_rule(lambda i, p, b: i < 2 * p / b),
    "ridge halved": bound_with_rule(lambda i, p, b: i < p / b / 2),
    "<= at the ridge (the ridge counted memory-bound)": bound_with_rule(lambda i, p, b: i <= p / b),
    "only the HBM roof (not hierarchical)": bound_hbm_only,
    "the level with the lowest intensity binds": bound_lowest_intensity,
    "all levels' bytes summed against HBM": bound_total_traffic,
    "the highest roof instead of the lowest": bound_max_of_roofs,
    "always memory-bound on HBM": lambda f, t, p, b: (f / t["HBM"] * b["HBM"], "HBM"),
})


# ------------------------------------------------------------------ compute_bound_batch
def batch_closed_form(rounding, strict=False, e_fixed=None):
    def fn(d, peak, bandwidth, e):
        e = e_fixed or e
        ridge = peak / bandwidth
        if d <= ridge * e:
            return None
        b = ridge * e * d / (2 * (d - ridge * e))
        value = rounding(b)
        if strict and value == b:
            value += 1
        return max(1, int(value))
    return fn


def batch_weights_only(d, peak, bandwidth, e):
    """Counts only the weight bytes: intensity 2 b d^2 / (e d^2) = 2b / e."""
    return max(1, math.ceil(peak / bandwidth * e / 2))


def batch_never_none(d, peak, bandwidth, e):
    ridge = peak / bandwidth
    if d <= ridge * e:
        return 10**9
    return ex.reference_compute_bound_batch(d, peak, bandwidth, e)


COMPUTE_BOUND_BATCH = Catalogue("compute_bound_batch", ex.check_compute_bound_batch, ex.reference_compute_bound_batch, {
    "off by one": lambda *a: (ex.reference_compute_bound_batch(*a) or 0) + 1,
    "floor of the closed form": batch_closed_form(math.floor),
    "strict > at the ridge": batch_closed_form(math.ceil, strict=True),
    "assumes 4-byte elements": batch_closed_form(math.ceil, e_fixed=4),
    "assumes 2-byte elements": batch_closed_form(math.ceil, e_fixed=2),
    "weights' bytes only": batch_weights_only,
    "never None": batch_never_none,
    "bandwidth / peak for the ridge": lambda d, p, w, e: ex.reference_compute_bound_batch(d, w * 1e24 / p, 1e12, e),
})


# ------------------------------------------------------------------ loads_in_flight
def loads_with_latency(pick, rounding=math.ceil, use_target=True, per_load=True):
    """A wrong answer whose loaded latency is n / R at the point ``pick(n, r, target)`` chooses."""
    def fn(inflight, rate, fraction, sms, threads, bytes_per_load):
        n, r = np.asarray(inflight, dtype=float), np.asarray(rate, dtype=float)
        target = fraction * r.max()
        i = pick(n, r, target)
        latency = float(n[i] / r[i])
        bytes_needed = (target if use_target else r.max()) * latency
        return latency, int(rounding(bytes_needed / (sms * threads * (bytes_per_load if per_load else 1))))
    return fn


def knee(n, r, target):
    reaching = np.flatnonzero(r >= target)
    return reaching[np.argmin(n[reaching])]


LOADS = Catalogue("loads_in_flight", ex.check_loads_in_flight, ex.reference_loads_in_flight, {
    "idle latency (the least-loaded point)": loads_with_latency(lambda n, r, t: int(np.argmin(n))),
    "the most-loaded point's latency": loads_with_latency(lambda n, r, t: int(np.argmax(n))),
    "latency at the best point, not the knee": loads_with_latency(lambda n, r, t: int(np.argmax(r))),
    "first point reaching the target in the given order": loads_with_latency(
        lambda n, r, t: int(np.flatnonzero(r >= t)[0])),
    "rounds down": loads_with_latency(knee, rounding=math.floor),
    "bytes per thread, not loads": loads_with_latency(knee, per_load=False),
    "best bandwidth, not the fraction": loads_with_latency(knee, use_target=False),
    "returns a float count": lambda *a: tuple(float(v) for v in ex.reference_loads_in_flight(*a)),
})


# ------------------------------------------------------------------ measure_on_roofline
def measured(counts=ex.kernel_counts, seconds_of=None, bound_of=None, rate_of=None):
    """The reference with one part replaced."""
    def fn(kernel, n, peak, bandwidth):
        flop, n_bytes = counts(kernel, n)
        seconds = benchmark(ex.reference_kernel_run(kernel, n), warmup=1, repeat=3, use_gpu=False).median
        if seconds_of:
            seconds = seconds_of(kernel, n, seconds, flop, n_bytes, peak, bandwidth)
        attainable = min(peak, flop / n_bytes * bandwidth)
        bound = "memory" if flop / n_bytes < peak / bandwidth else "compute"
        if bound_of:
            bound = bound_of(flop, n_bytes, seconds, peak, bandwidth)
        rate = rate_of(flop, n_bytes, seconds) if rate_of else flop / seconds
        return {"flop": flop, "bytes": n_bytes, "seconds": seconds, "flop_per_s": rate, "attainable": attainable,
                "bound": bound}
    return fn


def formula_only(seconds_of):
    """Counts right, nothing run: ``seconds_of(flop, bytes)`` stands in for a measurement."""
    def fn(kernel, n, peak, bandwidth):
        flop, n_bytes = ex.kernel_counts(kernel, n)
        seconds = seconds_of(flop, n_bytes)
        return {"flop": flop, "bytes": n_bytes, "seconds": seconds, "flop_per_s": flop / seconds,
                "attainable": min(peak, flop / n_bytes * bandwidth),
                "bound": "memory" if flop / n_bytes < peak / bandwidth else "compute"}
    return fn


def counts_replaced(kernel_name, new):
    def counts(kernel, n):
        return new(n) if kernel == kernel_name else ex.kernel_counts(kernel, n)
    return counts


MEASURE = Catalogue("measure_on_roofline", ex.check_measure_on_roofline, ex.reference_measure_on_roofline, {
    "axpy without the write of y": measured(counts_replaced("axpy", lambda n: (2.0 * n, 8.0 * n))),
    "matmul counts n^3 FLOP (a multiply-add as one)": measured(
        counts_replaced("matmul", lambda n: (float(n**3), 12.0 * n**2))),
    "matmul traffic with no reuse": measured(counts_replaced("matmul", lambda n: (2.0 * n**3, 8.0 * n**3 + 4 * n**2))),
    "sum counts n additions": measured(counts_replaced("sum", lambda n: (float(n), 4.0 * n + 4))),
    "the roofline time instead of a measurement": measured(
        seconds_of=lambda k, n, s, f, b, p, w: max(f / p, b / w)),
    "milliseconds": measured(seconds_of=lambda k, n, s, *rest: s * 1e3),
    "bound from the measured rate against the roof": measured(
        bound_of=lambda f, b, s, p, w: "memory" if f / s < min(p, f / b * w) else "compute"),
    "flop_per_s from bytes / seconds": measured(rate_of=lambda f, b, s: b / s),
    "measurement computed from bytes / an assumed 20 GB/s (nothing run)": formula_only(lambda f, b: b / 20e9),
    "roofline time on assumed CPU ceilings, 50 GFLOP/s and 20 GB/s (nothing run)":
        formula_only(lambda f, b: max(f / 50e9, b / 20e9)),
    "times the kernel, then reports bytes / an assumed 20 GB/s":
        measured(seconds_of=lambda k, n, s, f, b, p, w: b / 20e9),
})

# ------------------------------------------------------------------ tile_traffic
def traffic_with(m, n, k, tm, tn, tk, l2_bytes, e, *, edges="partial", lru=True, l2="finite", c_levels=("HBM", "L2"),
                 fits=lambda used, size, cap: used + size <= cap):
    """The simulation a learner would write (a list for the L2), each keyword one way of getting it wrong."""
    ceil = (lambda a, b: -(-a // b)) if edges != "floor" else (lambda a, b: max(a // b, 1))
    size = (lambda i, t, d: min(t, d - i * t)) if edges == "partial" else (lambda i, t, d: t)
    held, traffic = [], {"HBM": 0, "L2": 0}  # held: [key, bytes], least recently used first
    for bi in range(ceil(m, tm)):
        for bj in range(ceil(n, tn)):
            for kk in range(ceil(k, tk)):
                for key, count in ((("A", bi, kk), size(bi, tm, m) * size(kk, tk, k)),
                                   (("B", kk, bj), size(kk, tk, k) * size(bj, tn, n))):
                    n_bytes = count * e
                    traffic["L2"] += n_bytes
                    keys = [h[0] for h in held]
                    if l2 == "infinite" and key in keys or l2 == "finite" and key in keys:
                        if lru:
                            held.append(held.pop(keys.index(key)))
                        continue
                    traffic["HBM"] += n_bytes
                    if l2 == "infinite":
                        held.append([key, n_bytes])
                        continue
                    if l2 == "none":
                        continue
                    while held and not fits(sum(h[1] for h in held), n_bytes, l2_bytes):
                        held.pop(0)
                    if n_bytes <= l2_bytes:
                        held.append([key, n_bytes])
            for level in c_levels:
                traffic[level] += size(bi, tm, m) * size(bj, tn, n) * e
    return traffic


def traffic_formula(m, n, k, tm, tn, tk, l2_bytes, e):
    """Skips the simulation: lesson 01's closed form for L2, each matrix once from HBM."""
    return {"HBM": e * (m * k + k * n + m * n), "L2": e * (m * k * (n / tn) + k * n * (m / tm) + m * n)}


TRAFFIC = Catalogue("tile_traffic", ex.check_tile_traffic, ex.reference_tile_traffic, {
    "full tiles at the edges (no bounds check)": lambda *a: traffic_with(*a, edges="full"),
    "grid by floor division (edge tiles dropped)": lambda *a: traffic_with(*a, edges="floor"),
    "no L2: every load from HBM": lambda *a: traffic_with(*a, l2="none"),
    "an infinite L2: each tile once from HBM": lambda *a: traffic_with(*a, l2="infinite"),
    "FIFO L2: a hit does not refresh its tile": lambda *a: traffic_with(*a, lru=False),
    "evicts when the L2 would be exactly full": lambda *a: traffic_with(*a, fits=lambda u, s, c: u + s < c),
    "C left out": lambda *a: traffic_with(*a, c_levels=()),
    "C counted at L2 only": lambda *a: traffic_with(*a, c_levels=("L2",)),
    "elements, not bytes": lambda m, n, k, tm, tn, tk, l2, e: traffic_with(m, n, k, tm, tn, tk, l2 // e, 1),
    "tile_m and tile_n swapped": lambda m, n, k, tm, tn, tk, l2, e: traffic_with(m, n, k, tn, tm, tk, l2, e),
    "the closed formula, no simulation": traffic_formula,
})

CATALOGUES = [CLASSIFY, COMPUTE_BOUND_BATCH, LOADS, MEASURE, TRAFFIC]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
