"""Checks for the exercises of 03_roofline: a hierarchical roofline, the compute-bound batch, Little's law with
the loaded latency, and a kernel measured and placed on this machine's roofline."""

from __future__ import annotations

import math

import numpy as np

from mlsys_lab import records
from mlsys_lab.exercises import Case, as_python_scalar, check, close_enough, is_number, rng
from mlsys_lab.exercises.loops import cpu_seconds_of
from mlsys_lab.exercises.roofline_cuda import check_reduce_sum  # noqa: F401  (re-exported: the lesson's checks)
from mlsys_lab.hardware import H200, PRESETS
from mlsys_lab.timing import benchmark
from mlsys_lab.units import BYTES_PER_DTYPE

HARDWARE = list(PRESETS.values())
LEVELS = ("HBM", "L2", "shared")


# ------------------------------------------------------------------ 6.1 a kernel on a hierarchical roofline
def reference_bound(flop: float, traffic: dict, peak_flops: float, bandwidths: dict) -> tuple[float, str]:
    """(attainable FLOP/s, limiter): each level's roof is (flop / its bytes) x its bandwidth; the lowest of the
    roofs and the peak binds. The limiter is "compute" when no roof is below the peak (the ridge counts as
    compute-bound), else the level with the lowest roof (the first such level on a tie)."""
    attainable, limiter = float(peak_flops), "compute"
    for level, n_bytes in traffic.items():
        roof = flop / n_bytes * bandwidths[level]
        if roof < attainable:
            attainable, limiter = roof, level
    return attainable, limiter


def _same_bound(got, expected) -> bool:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    return close_enough(float(got[0]), expected[0]) and got[1] == expected[1]


def _bound_case(label: str, flop: float, traffic: dict, peak: float, bandwidths: dict) -> Case:
    return Case(label, (flop, traffic, peak, bandwidths), expected=reference_bound(flop, traffic, peak, bandwidths))


def check_classify_bound(fn) -> None:
    """``fn(flop, traffic, peak_flops, bandwidths)`` -> (attainable FLOP/s, "compute" or the binding level).

    Cases straddle every preset's ridge in every dtype (just above and just below it, at a random level),
    land exactly on a ridge (powers of two, so every way of computing it agrees), give a level with more
    bytes than the binding one but a faster bandwidth, and a single-level (plain) roofline.
    """
    bw = {"HBM": 4.8e12, "L2": 12e12, "shared": 31e12}
    cases = [
        # the worked example: a 4096^3 fp32 matmul in 16 x 16 tiles (each matrix once from HBM, the strips from L2)
        _bound_case("4096^3 fp32, tile 16, H200", 2 * 4096.0**3,
                    {"HBM": 12 * 4096.0**2, "L2": 4 * (2 * 4096.0**3 / 16 + 4096.0**2)}, 67e12, bw),
        _bound_case("exactly on the HBM ridge", 2.0**30, {"HBM": 2.0**26, "L2": 2.0**25}, 2.0**44, {"HBM": 2.0**40,
                    "L2": 2.0**41}),
        _bound_case("exactly on the L2 ridge", 2.0**30, {"HBM": 2.0**22, "L2": 2.0**27}, 2.0**44, {"HBM": 2.0**40,
                    "L2": 2.0**41}),
        _bound_case("HBM binds, L2 moves more bytes", 1e12, {"HBM": 1e11, "L2": 2e11}, 67e12, bw),
        _bound_case("one level (plain roofline)", 1e9, {"HBM": 1.2e8}, 67e12, {"HBM": 4.8e12}),
    ]
    g = rng()
    for hw in HARDWARE:
        for dtype in hw.peak_flop_per_s:
            peak, hbm = hw.peak(dtype), hw.memory_bandwidth_bytes_per_s
            bandwidths = {"HBM": hbm, "L2": hbm * float(g.uniform(2, 4)), "shared": hbm * float(g.uniform(5, 9))}
            for factor in (float(g.uniform(1.05, 1.9)), float(g.uniform(0.55, 0.95))):  # roof / peak, both sides
                flop = float(2 * int(g.integers(2**20, 2**34)))
                binding = LEVELS[int(g.integers(3))]
                roofs = {level: peak * factor * float(g.uniform(1.2, 3)) for level in LEVELS}
                roofs[binding] = peak * factor
                traffic = {level: float(round(flop * bandwidths[level] / roofs[level])) for level in LEVELS}
                cases.append(_bound_case(f"{binding} roof at {factor:.2f} x peak, {hw.name} {dtype}", flop, traffic,
                                         peak, bandwidths))
    check("classify_bound", fn, cases, compare=_same_bound)


# ------------------------------------------------------------------ 6.2 the compute-bound batch
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


def check_compute_bound_batch(fn) -> None:
    """``fn(d_model, peak_flops, bandwidth, bytes_per_element)`` -> smallest compute-bound batch, or None.

    Every preset in every dtype, a batch landing exactly on the ridge (powers of two), a d just past d / e =
    ridge (a huge batch) and just short of it (None), and batch 1 already compute-bound.
    """
    fixed = [
        ("d=8192, H200 bf16", (8192, 989.5e12, 4.8e12, 2)),
        ("d=128, H200 bf16 (never)", (128, 989.5e12, 4.8e12, 2)),
        ("exactly on the ridge at b=2048", (4096, 1024e12, 1e12, 2)),
        ("intensity at b=1 already past the ridge", (8192, 1e12, 1e12, 4)),
        ("d just past ridge x e", (4124, 1024e12, 1e12, 4)),
        ("d just short of ridge x e", (4092, 1024e12, 1e12, 4)),
    ]
    cases = [Case(label, args, expected=reference_compute_bound_batch(*args)) for label, args in fixed]
    g = rng()
    for hw in HARDWARE:
        for dtype in hw.peak_flop_per_s:
            e = BYTES_PER_DTYPE[dtype]
            ridge = hw.ridge_point(dtype)
            d = int(round(ridge * e * float(g.uniform(1.3, 12)))) + int(g.integers(0, 64))
            args = (d, hw.peak(dtype), hw.memory_bandwidth_bytes_per_s, e)
            cases.append(Case(f"d={d}, {hw.name} {dtype}", args, expected=reference_compute_bound_batch(*args)))
    check("compute_bound_batch", fn, cases)


# ------------------------------------------------------------------ 6.3 Little's law with the loaded latency
def reference_loads_in_flight(inflight, bytes_per_s, fraction: float, n_sms: int, threads_per_sm: int,
                              bytes_per_load: int) -> tuple[float, int]:
    """(loaded latency in s, loads in flight per thread) to reach ``fraction`` of the sweep's best bandwidth.

    The loaded latency is n / R at the knee: the point with the fewest bytes in flight among those reaching
    ``fraction`` x best. Little's law with it: bytes in flight = target x latency, shared by every thread.
    """
    n, r = np.asarray(inflight, dtype=float), np.asarray(bytes_per_s, dtype=float)
    target = fraction * r.max()
    reaching = np.flatnonzero(r >= target)
    knee = reaching[np.argmin(n[reaching])]
    latency = float(n[knee] / r[knee])
    return latency, math.ceil(target * latency / (n_sms * threads_per_sm * bytes_per_load))


def _same_latency_and_loads(got, expected) -> bool:
    """A latency (any number) and a whole count of loads (an int, NumPy's too: values, not types)."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    latency, loads = as_python_scalar(got[0]), as_python_scalar(got[1])
    if not is_number(latency) or not isinstance(loads, int) or isinstance(loads, bool):
        return False
    return close_enough(float(latency), expected[0]) and loads == expected[1]


def synthetic_sweep(g: np.random.Generator) -> tuple[list[float], list[float]]:
    """A bandwidth sweep whose latency grows under load: R(n) = R_max n / (n + R_max t0), so n / R = t0 + n / R_max
    (a queue behind the memory), with a little noise, given in shuffled order."""
    peak, idle = float(g.uniform(1e12, 8e12)), float(g.uniform(300e-9, 800e-9))
    inflight = np.geomspace(peak * idle / 8, peak * idle * 64, int(g.integers(10, 20)))
    rate = peak * inflight / (inflight + peak * idle) * g.uniform(0.97, 1.0, inflight.size)
    order = g.permutation(inflight.size)
    return [float(v) for v in inflight[order]], [float(v) for v in rate[order]]


def check_loads_in_flight(fn) -> None:
    """``fn(inflight, bytes_per_s, fraction, n_sms, threads_per_sm, bytes_per_load)`` -> (loaded latency in s,
    loads in flight per thread, rounded up). The worked example is the recorded H200 sweep; the other sweeps are
    drawn with a latency that grows under load, in shuffled order."""
    sweep = records.load("roofline_h200")["littles_law"]["hbm_inflight_sweep"]
    args = ([float(r["bytes_in_flight"]) for r in sweep], [r["bytes_per_s"] for r in sweep], 0.95, 132, 1024, 4)
    cases = [Case("the recorded H200 sweep, 95%, 132 SMs x 1024 threads, 4 B", args,
                  expected=reference_loads_in_flight(*args))]
    g = rng()
    for _ in range(10):
        inflight, rate = synthetic_sweep(g)
        args = (inflight, rate, float(g.choice([0.8, 0.9, 0.95])), int(g.integers(60, 160)),
                int(g.choice([256, 512, 1024, 2048])), int(g.choice([4, 8, 16])))
        cases.append(Case(f"{len(inflight)}-point sweep, {args[2]:.0%}, {args[3]} SMs x {args[4]}, {args[5]} B",
                          args, expected=reference_loads_in_flight(*args)))
    check("loads_in_flight", fn, cases, compare=_same_latency_and_loads)


# ------------------------------------------------------------------ 6.4 a kernel measured and placed
KERNELS = ("axpy", "sum", "matmul")
CPU_SLACK = 4  # the check's wall-clock runs against the call's CPU time: threads, clocks, caches
TIME_BAND = 8.0  # the learner's time must be within this factor of the check's own measurement
CALL_RUNS = 2  # the learner's call, clocked by the check, must hold about this many runs of the kernel


def kernel_counts(kernel: str, n: int) -> tuple[float, float]:
    """(FLOP, minimum bytes) of one of ``KERNELS`` on fp32 data of size n.

    axpy y = a x + y (n elements): 2n FLOP, 12n bytes (x and y read, y written). sum of n elements: n - 1
    additions, 4n + 4 bytes. matmul of two n x n matrices: 2n^3 FLOP, 12n^2 bytes (each matrix once).
    """
    if kernel == "axpy":
        return 2.0 * n, 12.0 * n
    if kernel == "sum":
        return float(n - 1), 4.0 * n + 4
    if kernel == "matmul":
        return 2.0 * n**3, 12.0 * n**2
    raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}")


def reference_kernel_run(kernel: str, n: int):
    """A zero-argument callable running ``kernel`` of size n on fresh fp32 NumPy arrays."""
    if kernel == "matmul":
        a, b = (np.full((n, n), 0.5, dtype=np.float32) for _ in range(2))
        return lambda: a @ b
    x, y = (np.full(n, 0.5, dtype=np.float32) for _ in range(2))
    if kernel == "sum":
        return lambda: x.sum()
    return lambda: np.add(np.multiply(np.float32(2.0), x), y, out=y)


def reference_measure_on_roofline(kernel: str, n: int, peak_flops: float, bandwidth: float) -> dict:
    """Count, time (median of NumPy runs) and place ``kernel`` of size n under the roof (peak, bandwidth)."""
    flop, n_bytes = kernel_counts(kernel, n)
    seconds = benchmark(reference_kernel_run(kernel, n), warmup=1, repeat=5, use_gpu=False).median
    attainable = min(peak_flops, flop / n_bytes * bandwidth)
    return {"flop": flop, "bytes": n_bytes, "seconds": seconds, "flop_per_s": flop / seconds,
            "attainable": attainable, "bound": "memory" if flop / n_bytes < peak_flops / bandwidth else "compute"}


def _same_placement(got, expected) -> bool:
    """The counts are whole numbers, compared to the last unit (n - 1 is not n, even for n in the millions)."""
    if not isinstance(got, dict):
        return False
    return all(key in got and close_enough(got[key], value, **({"rtol": 1e-12, "atol": 0.0} if key in ("flop", "bytes")
                                                                 else {})) for key, value in expected.items())


def _measured_consistently(kernel: str, n: int, call_cpu: dict[str, float], earlier: list[tuple[float, float, float]]):
    """The learner's time against what the check measures itself: the CPU time of their whole call (its own clock,
    or when grading the worker's clock read from outside), and its own runs of the same kernel right after."""
    def check_result(got: dict) -> str | None:
        seconds, rate = as_python_scalar(got.get("seconds")), got.get("flop_per_s")
        if not is_number(seconds) or not seconds > 0:
            return f"seconds must be a time > 0; got {seconds!r}"
        if not close_enough(rate, got["flop"] / seconds):
            return f"flop_per_s {rate!r} is not flop / seconds = {got['flop'] / seconds:.6g}"
        for other_flop, other_bytes, other_seconds in earlier:  # a formula gives the same bytes (or flop) per second
            for what, count, other, unit in (("bytes", got["bytes"], other_bytes, "B/s"),
                                              ("flop", got["flop"], other_flop, "FLOP/s")):
                if math.isclose(count / seconds, other / other_seconds, rel_tol=1e-9):
                    return (f"seconds is {what} / {count / seconds:.4g} {unit}, the same rate as in an earlier case to "
                            "nine digits: a formula, not a measurement")
        earlier.append((got["flop"], got["bytes"], seconds))
        # the check's own runs of the same kernel, right after the learner's: a busy machine widens the band
        samples = benchmark(reference_kernel_run(kernel, n), warmup=1, repeat=5, use_gpu=False).samples
        low, high = min(samples) / TIME_BAND, max(samples) * TIME_BAND
        # CPU time, unlike the wall time a learner measures, does not stretch on a busy machine: the call must have
        # spent about what the kernel costs, CALL_RUNS times (a warm-up and a timed run), as a measurement does
        cpu, needed = call_cpu["last"], CALL_RUNS * min(samples) / CPU_SLACK
        if cpu < needed:
            return (f"seconds {seconds:.3g} is not a time measured in your call: the check clocked the whole call at "
                    f"{cpu:.3g} s of CPU, less than {CALL_RUNS} runs of this kernel would take (at least {needed:.3g} "
                    f"s: the check's own runs take {min(samples):.3g} s or more)")
        if not low <= seconds <= high:
            return (f"seconds {seconds:.3g} is outside {low:.3g} to {high:.3g} s, {TIME_BAND:g}x around the check's "
                    f"own runs of the same kernel on this machine ({min(samples):.3g} to {max(samples):.3g} s)")
        return None

    return check_result


def check_measure_on_roofline(fn) -> None:
    """``fn(kernel, n, peak_flops, bandwidth)`` -> {"flop", "bytes", "seconds", "flop_per_s", "attainable", "bound"}.

    Counts, attainable rate and bound must match a trusted recount; flop_per_s must be the learner's flop / seconds.
    The time is judged against what the check measures itself, never against a figure: the check clocks the
    learner's whole call (CPU time: in a graded run the worker's clock, read from the grader), which must hold about
    :data:`CALL_RUNS` runs of the kernel (a warm-up and a timed run; CPU time, unlike wall time, does not stretch on
    a busy machine); the time must be within 8x of
    the check's own NumPy runs of the same kernel on the same machine; and bytes (or flop) / seconds must not come
    out the same in two cases, as a formula's would. axpy and sum are sized to run for a millisecond or so, far
    longer than a call that only computes a formula. Ceilings are the H200's (where every CPU time is far from the
    roofline time) and drawn ones straddling each kernel's intensity.
    """
    sizes = {"axpy": (2**20, 2**21), "sum": (2**21, 2**22), "matmul": (32, 65)}  # n^3 <= 2^18: one OpenBLAS thread
    g = rng()
    plan = [("axpy", H200.peak("fp32"), H200.memory_bandwidth_bytes_per_s),
            ("matmul", H200.peak("fp32"), H200.memory_bandwidth_bytes_per_s)]
    for kernel in KERNELS:
        for factor in (float(g.uniform(0.5, 0.9)), float(g.uniform(1.1, 2))):  # ridge below and above the kernel
            plan.append((kernel, None, factor))
    cases, call_cpu, earlier = [], {"last": 0.0}, []
    for kernel, peak, third in plan:
        low, high = sizes[kernel]
        n = int(g.integers(low, high))
        flop, n_bytes = kernel_counts(kernel, n)
        if peak is None:  # a bandwidth of 100 GB/s and a peak putting the ridge at factor x the intensity
            peak, bandwidth = flop / n_bytes * third * 100e9, 100e9
        else:
            bandwidth = third
        expected = {"flop": flop, "bytes": n_bytes, "attainable": min(peak, flop / n_bytes * bandwidth),
                    "bound": "memory" if flop / n_bytes < peak / bandwidth else "compute"}
        cases.append(Case(f"{kernel} n={n}, peak {peak:.3g} FLOP/s, {bandwidth:.3g} B/s", (kernel, n, peak, bandwidth),
                          expected=expected, check_result=_measured_consistently(kernel, n, call_cpu, earlier)))

    def clocked(*args):
        call_cpu["last"], result = cpu_seconds_of(fn, args)
        return result

    check("measure_on_roofline", clocked, cases, compare=_same_placement)


# ------------------------------------------------------------------ 6.5 the traffic at each level, simulated
def reference_tile_traffic(m: int, n: int, k: int, tile_m: int, tile_n: int, tile_k: int, l2_bytes: int,
                           element_bytes: int = 4) -> dict[str, int]:
    """Bytes crossing L2 (into the SMs) and HBM (into L2) of a tiled matmul C = A B, A (m, k), B (k, n).

    Blocks compute the tile_m x tile_n tiles of C one after another, row-major over the tile grid; each steps
    through k by tile_k, loading its A tile then its B tile (edge tiles partial: only elements inside the
    matrix), and writes its C tile at the end. Every load crosses L2; L2 is an LRU cache of whole tiles holding
    ``l2_bytes``: a load of a tile it holds costs no HBM bytes, a miss reads the tile from HBM after evicting the
    least recently used tiles until it fits (a tile larger than the L2 is not kept). C is written through both.
    """
    from collections import OrderedDict

    grid_m, grid_n, steps = -(-m // tile_m), -(-n // tile_n), -(-k // tile_k)

    def extent(index: int, tile: int, size: int) -> int:
        return min(tile, size - index * tile)

    held: OrderedDict = OrderedDict()  # tile -> bytes, least recently used first
    used = l2 = hbm = 0
    for bi in range(grid_m):
        for bj in range(grid_n):
            for kk in range(steps):
                for key, n_bytes in ((("A", bi, kk), extent(bi, tile_m, m) * extent(kk, tile_k, k)),
                                     (("B", kk, bj), extent(kk, tile_k, k) * extent(bj, tile_n, n))):
                    n_bytes *= element_bytes
                    l2 += n_bytes
                    if key in held:
                        held.move_to_end(key)
                        continue
                    hbm += n_bytes
                    while held and used + n_bytes > l2_bytes:
                        used -= held.popitem(last=False)[1]
                    if n_bytes <= l2_bytes:
                        held[key] = n_bytes
                        used += n_bytes
            c_bytes = extent(bi, tile_m, m) * extent(bj, tile_n, n) * element_bytes
            l2, hbm = l2 + c_bytes, hbm + c_bytes
    return {"HBM": hbm, "L2": l2}


def _same_traffic(got, expected) -> bool:
    if not isinstance(got, dict) or set(got) != set(expected):
        return False
    return all(isinstance(got[level], (int, float, np.integer, np.floating)) and not isinstance(got[level], bool)
               and float(got[level]) == expected[level] for level in expected)


def _traffic_case(label: str, *args) -> Case:
    return Case(label, args, expected=reference_tile_traffic(*args))


def check_tile_traffic(fn) -> None:
    """``fn(m, n, k, tile_m, tile_n, tile_k, l2_bytes, element_bytes)`` -> {"HBM": bytes, "L2": bytes}, exact.

    Tiles that divide and tiles that do not (in each dimension, and larger than the matrix), no L2, an L2 that
    holds everything, one exactly the size of A and B together (it fits), one a byte short, one that holds an A
    strip but not B (B is read again for every row of blocks), tall and wide shapes, every element size.
    """
    ab = (4 * 6 + 6 * 6) * 4  # A and B of the 4 x 6 x 6 case, fp32: the smallest L2 that reads each once
    cases = [
        _traffic_case("example: 4 x 4 x 4, 2 x 2 x 2 tiles, L2 of 1 MiB, fp32", 4, 4, 4, 2, 2, 2, 2**20, 4),
        _traffic_case("example: the same with no L2", 4, 4, 4, 2, 2, 2, 0, 4),
        _traffic_case("tiles that do not divide: 7 x 5 x 9 in 2 x 3 x 4 tiles, 1 MiB", 7, 5, 9, 2, 3, 4, 2**20, 4),
        _traffic_case("tiles larger than the matrix", 5, 3, 6, 8, 8, 8, 2**20, 2),
        _traffic_case("an L2 exactly the size of A and B: everything fits", 4, 6, 6, 2, 3, 3, ab, 4),
        _traffic_case("an L2 one byte short of A and B", 4, 6, 6, 2, 3, 3, ab - 1, 4),
        _traffic_case("L2 holds a strip of A but not B: B again for every row of blocks", 64, 64, 64, 16, 16, 16,
                      3 * 16 * 64 * 4, 4),
        _traffic_case("tall: 40 x 3 x 5, 8 x 2 x 3 tiles, no L2, fp64", 40, 3, 5, 8, 2, 3, 0, 8),
        _traffic_case("wide and non-square tiles: 6 x 50 x 7, 4 x 16 x 2, 2 KiB, bf16", 6, 50, 7, 4, 16, 2, 2048, 2),
    ]
    g = rng()
    for _ in range(6):
        m, n, k = (int(v) for v in g.integers(1, 60, 3))
        tile_m, tile_n, tile_k = (int(g.choice([1, 2, 3, 4, 5, 8, 16, 32])) for _ in range(3))
        element = int(g.choice([1, 2, 4, 8]))
        largest = (tile_m * tile_k + tile_k * tile_n) * element
        total = (m * k + k * n) * element
        l2 = int(g.choice([0, largest, int(g.integers(largest, max(largest, total // 2) + 1)), total]))
        cases.append(_traffic_case(f"{m} x {n} x {k}, {tile_m} x {tile_n} x {tile_k} tiles, L2 {l2} B, "
                                   f"{element}-byte elements", m, n, k, tile_m, tile_n, tile_k, l2, element))
    check("tile_traffic", fn, cases, compare=_same_traffic)
