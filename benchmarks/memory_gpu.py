"""Measure every kernel of lessons 03 (roofline) and 04 (memory hierarchy) on a GPU; write JSON.

    PYTHONPATH=$PWD python3 benchmarks/memory_gpu.py --out DIR

Writes DIR/roofline_h200.json (ceilings, Little's-law sweeps) and DIR/memory_h200.json (memory
spaces, fused kernels, allocation, the SGEMM progression), each with the device name and date.
Every kernel is first checked against its NumPy reference by relative error on fresh random inputs,
then timed with CUDA events after warm-up (median of the timed runs). Copy the files into
mlsys_lab/data/ so that learners without a GPU see these figures.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")  # cuBLAS FP32 without TF32: the fair SGEMM baseline

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from mlsys_lab import backend  # noqa: E402
from mlsys_lab.kernels import loader  # noqa: E402
from mlsys_lab.kernels.memory_hierarchy import (  # noqa: E402
    constant_memory,
    fused,
    global_memory,
    local_memory,
    sgemm,
    shared_memory,
)
from mlsys_lab.kernels.roofline import littles_law
from mlsys_lab.timing import L2_FLUSH_BYTES, benchmark  # noqa: E402
from mlsys_lab.validation import relative_error  # noqa: E402

RNG = np.random.default_rng()  # fresh inputs on every run
MiB = 2**20


def timed(fn, warmup: int = 3, repeat: int = 20, flush: bool = False) -> dict:
    """Median of event-timed runs. ``flush``: a 512 MiB fill before each run (cold L2, and the GPU is
    busy while the host prepares the launch: see mlsys_lab.timing.benchmark)."""
    t = benchmark(fn, warmup=warmup, repeat=repeat, flush_bytes=L2_FLUSH_BYTES if flush else 0)
    return {"median_s": t.median, "min_s": t.min, "max_s": t.max, "runs": len(t.samples), "l2_flushed": flush}


def guarded(name: str, fn, results: dict) -> None:
    """Run one section; an exception is recorded (and printed) instead of stopping the run."""
    start = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # record and go on: one broken kernel must not hide the others
        traceback.print_exc()
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    results[name]["measured_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"[{name}] {time.perf_counter() - start:.1f} s", flush=True)


def device_info() -> dict:
    xp = backend.xp
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {
        "name": name,
        "sm_count": int(props["multiProcessorCount"]),
        "clock_khz": int(props["clockRate"]),
        "l2_bytes": int(props["l2CacheSize"]),
        "shared_per_sm_bytes": int(props["sharedMemPerMultiprocessor"]),
        "cupy": xp.__version__,
        "cuda_runtime": int(xp.cuda.runtime.runtimeGetVersion()),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


# ------------------------------------------------------------------------------------ ceilings
def ceilings(sm_count: int) -> dict:
    xp = backend.xp
    out = {}
    src = xp.random.standard_normal(2**28, dtype=xp.float32)  # 1 GiB, fresh on the device
    dst = xp.empty_like(src)
    t = timed(lambda: xp.copyto(dst, src), repeat=20, flush=True)
    out["copy_cupy"] = {**t, "n_bytes": 2 * src.nbytes, "bytes_per_s": 2 * src.nbytes / t["median_s"]}
    mine = global_memory.copy(src)
    ok = bool((mine == src).all())
    t = timed(lambda: global_memory.copy(src), repeat=20, flush=True)
    out["copy_kernel"] = {
        **t,
        "n_bytes": 2 * src.nbytes,
        "bytes_per_s": 2 * src.nbytes / t["median_s"],
        "exact": ok,
    }
    for label, dtype, n in (("sgemm_cublas_fp32", np.float32, 4096), ("hgemm_cublas_fp16", np.float16, 8192)):
        a = xp.asarray(RNG.standard_normal((n, n), dtype=np.float32)).astype(dtype)
        b = xp.asarray(RNG.standard_normal((n, n), dtype=np.float32)).astype(dtype)
        c = xp.empty((n, n), dtype=dtype)
        t = timed(lambda a=a, b=b, c=c: xp.matmul(a, b, out=c), repeat=30)
        out[label] = {**t, "n": n, "flop": 2 * n**3, "flop_per_s": 2 * n**3 / t["median_s"]}
    x = xp.random.standard_normal(2 * MiB, dtype=xp.float32)  # 8 MiB: lives in L2
    passes = 200
    partial = global_memory.read_passes(x, passes)
    total = passes * float(x.sum(dtype=xp.float64))
    err = abs(float(partial.sum(dtype=xp.float64)) - total) / abs(total)
    t = timed(lambda: global_memory.read_passes(x, passes), repeat=20)
    n_bytes = passes * x.nbytes
    out["l2_read"] = {
        **t,
        "buffer_bytes": x.nbytes,
        "n_bytes": n_bytes,
        "bytes_per_s": n_bytes / t["median_s"],
        "rel_error_of_sum": err,
    }
    blocks, threads, iters = sm_count * 16, 512, 4096
    got = shared_memory.shared_stride(1, iters, blocks, threads)
    ok = bool((backend.asnumpy(got) == shared_memory.shared_stride_reference(1, iters, blocks * threads)).all())
    t = timed(lambda: shared_memory.shared_stride(1, iters, blocks, threads), repeat=20)
    n_bytes = 4 * blocks * threads * iters
    out["shared_read"] = {**t, "n_bytes": n_bytes, "bytes_per_s": n_bytes / t["median_s"], "exact": ok}
    return out


# -------------------------------------------------------------------------------- Little's law
def littles(sm_count: int) -> dict:
    xp = backend.xp
    out = {}
    for label, n_elements in (("hbm", 2**26), ("l2", 2**18)):
        nxt_host = littles_law.chase_order(n_elements, seed=int(RNG.integers(2**31)))
        nxt = xp.asarray(nxt_host)
        steps = 20000
        start = int(RNG.integers(n_elements))
        final, _ = littles_law.pointer_chase(nxt, steps, start)
        correct = final == littles_law.chase_reference(nxt_host, steps, start)
        # HBM: every run starts somewhere new, so its path is not in L2; L2: the same (warm) path again.
        starts = iter(RNG.integers(n_elements, size=16).tolist()) if label == "hbm" else None
        cycles = []

        def chase(nxt=nxt, steps=steps, starts=starts, cycles=cycles, start=start):
            cycles.append(littles_law.pointer_chase(nxt, steps, next(starts) if starts else start)[1])

        t = timed(chase, warmup=1, repeat=5)
        out[f"chase_{label}"] = {
            **t,
            "buffer_bytes": 4 * n_elements,
            "steps": steps,
            "correct": correct,
            "latency_s": t["median_s"] / steps,
            "latency_cycles": float(np.median(cycles)) / steps,
        }
    x = xp.random.standard_normal(2**28, dtype=xp.float32)  # 1 GiB, far beyond L2
    total = float(x.sum(dtype=xp.float64))
    sweep = []
    for chains in (1, 2, 4, 8):
        for blocks in (128, 256, 512, 1024, 2048):
            threads = 256
            assert littles_law.inflight_covers(x.size // 4, blocks, threads, chains)
            got = littles_law.read_inflight(x, blocks, threads, chains)
            err = abs(float(got.sum(dtype=xp.float64)) - total) / abs(total)
            t = timed(
                lambda b=blocks, c=chains, th=threads: littles_law.read_inflight(x, b, th, c),
                warmup=1,
                repeat=5,
            )
            resident_threads = min(blocks * threads, sm_count * 2048)
            sweep.append(
                {
                    **t,
                    "chains": chains,
                    "blocks": blocks,
                    "threads": threads,
                    "resident_threads": resident_threads,
                    "bytes_in_flight": resident_threads * chains * 16,
                    "bytes_per_s": x.nbytes / t["median_s"],
                    "rel_error_of_sum": err,
                }
            )
    out["hbm_inflight_sweep"] = sweep
    iters = 16384
    ffma = []
    for chains in (1, 2, 4, 8):
        for warps in (1, 2, 4, 8, 16, 32):
            got, cycles = littles_law.ffma_chains(sm_count, 32 * warps, chains, iters)
            expected = littles_law.ffma_reference(chains, iters)
            err = float(
                abs(backend.asnumpy(got).astype(np.float64) - expected).max() / max(abs(expected), 1e-30)
            )
            t = timed(
                lambda w=warps, c=chains: littles_law.ffma_chains(sm_count, 32 * w, c, iters),
                warmup=2,
                repeat=10,
            )
            fma = sm_count * 32 * warps * chains * iters
            ffma.append(
                {
                    **t,
                    "chains": chains,
                    "warps_per_sm": warps,
                    "fma": fma,
                    "fma_per_s": fma / t["median_s"],
                    "cycles_per_iter": float(backend.asnumpy(cycles).mean()) / iters,
                    "rel_error": err,
                }
            )
    out["ffma_sweep"] = ffma
    mma = []
    iters = 8192
    for chains in (1, 2, 4):
        for warps in (1, 2, 4, 8, 16, 32):
            got, cycles = littles_law.mma_chains(sm_count, warps, chains, iters)
            expected = 4.0 * sum(range(chains))
            ok = bool((backend.asnumpy(got) == expected).all())
            t = timed(
                lambda w=warps, c=chains: littles_law.mma_chains(sm_count, w, c, iters), warmup=2, repeat=10
            )
            n_mma = sm_count * warps * chains * iters
            mma.append(
                {
                    **t,
                    "chains": chains,
                    "warps_per_sm": warps,
                    "mma": n_mma,
                    "flop_per_s": n_mma * littles_law.MMA_FLOP / t["median_s"],
                    "cycles_per_iter": float(backend.asnumpy(cycles).mean()) / iters,
                    "exact": ok,
                }
            )
    out["mma_sweep"] = mma
    return out


# -------------------------------------------------------------------------------- memory spaces
def measure_global() -> dict:
    xp = backend.xp
    n = 2**25
    x = xp.random.standard_normal(n * 32, dtype=xp.float32)
    rows = []
    for stride in (1, 2, 4, 8, 16, 32):
        got = global_memory.read_strided(x, n, stride)
        ok = bool((got == x[::stride][:n]).all())
        t = timed(lambda s=stride: global_memory.read_strided(x, n, s))
        rows.append(
            {
                **t,
                "stride": stride,
                "n": n,
                "useful_bytes": 8 * n,
                "useful_bytes_per_s": 8 * n / t["median_s"],
                "exact": ok,
            }
        )
    return {"strided_read": rows}


def measure_shared(sm_count: int) -> dict:
    xp = backend.xp
    out = {}
    x = xp.random.standard_normal((8192, 8192), dtype=xp.float32)
    expected = xp.ascontiguousarray(x.T)
    t = timed(lambda: xp.ascontiguousarray(x.T))
    rows = [{**t, "variant": "cupy_transpose", "bytes_per_s": 2 * x.nbytes / t["median_s"], "exact": True}]
    for variant in shared_memory.TRANSPOSE_KERNELS:
        ok = bool((shared_memory.transpose_on_gpu(x, variant) == expected).all())
        t = timed(lambda v=variant: shared_memory.transpose_on_gpu(x, v))
        rows.append({**t, "variant": variant, "bytes_per_s": 2 * x.nbytes / t["median_s"], "exact": ok})
    odd = xp.asarray(RNG.standard_normal((1000, 777), dtype=np.float32))
    out["transpose_odd_shape_exact"] = all(
        bool((shared_memory.transpose_on_gpu(odd, v) == odd.T).all()) for v in shared_memory.TRANSPOSE_KERNELS
    )
    out["transpose"] = rows
    blocks, threads, iters = sm_count * 16, 512, 2048
    strides = []
    for stride in range(1, 33):
        got = backend.asnumpy(shared_memory.shared_stride(stride, iters, blocks, threads))
        ok = bool((got == shared_memory.shared_stride_reference(stride, iters, blocks * threads)).all())
        t = timed(lambda s=stride: shared_memory.shared_stride(s, iters, blocks, threads), repeat=10)
        strides.append({**t, "stride": stride, "exact": ok, "loads": blocks * threads * iters})
    out["shared_stride"] = strides
    return out


def measure_constant() -> dict:
    xp = backend.xp
    n = 2**24
    x_host = RNG.uniform(-1, 1, n).astype(np.float32)
    c_host = (RNG.uniform(-1, 1, constant_memory.N_COEFFS) / 2).astype(np.float32)
    x, coeffs = xp.asarray(x_host), xp.asarray(c_host)
    rows = []
    for space in ("constant", "global"):
        for spread in (0, 1):
            got = backend.asnumpy(constant_memory.poly(x, coeffs, spread, space))[:65536]
            err = relative_error(got, constant_memory.poly_reference(x_host[:65536], c_host, spread))
            t = timed(lambda s=spread, sp=space: constant_memory.poly(x, coeffs, s, sp))
            rows.append({**t, "space": space, "spread": spread, "rel_error": err})
    return {"poly": rows, "n": n}


def measure_local() -> dict:
    xp = backend.xp
    n, iters, n_live = 2**22, 64, 64
    x_host = RNG.uniform(-1, 1, n).astype(np.float32)
    x = xp.asarray(x_host)
    expected = local_memory.register_pressure_reference(x_host[:4096], n_live, iters)
    rows = []
    for cap in (None, 64, 48, 32):
        fn = local_memory.register_pressure_kernel(n_live, cap)
        got = backend.asnumpy(local_memory.register_pressure(x, n_live, iters, cap))[:4096]
        t = timed(lambda c=cap: local_memory.register_pressure(x, n_live, iters, c))
        rows.append(
            {
                **t,
                "max_registers": cap,
                "num_regs": int(fn.num_regs),
                "local_size_bytes": int(fn.local_size_bytes),
                "rel_error": relative_error(got, expected),
            }
        )
    return {"register_pressure": rows, "n": n, "iters": iters, "n_live": n_live}


# -------------------------------------------------------------------------------- fused kernels
def measure_fused() -> dict:
    xp = backend.xp
    out = {}
    rows, cols = 16384, 4096
    x_host = RNG.standard_normal((rows, cols), dtype=np.float32) * 3
    x = xp.asarray(x_host)
    got = fused.softmax_rows(x)
    sample = RNG.choice(rows, 512, replace=False)
    err = relative_error(backend.asnumpy(got)[sample], fused.softmax_reference(x_host[sample]))

    def unfused():
        e = xp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    t_fused, t_unfused = timed(lambda: fused.softmax_rows(x), repeat=100, flush=True), timed(unfused, flush=True)
    variants = []  # launch shapes of the same one-read-one-write kernel, each checked, then timed
    configs = [("softmax_rows", threads, mb, st) for threads in (128, 256, 512, 1024) for mb in (1, 2048 // threads)
               for st in (False, True)]
    configs += [("softmax_rows_persistent", threads, bps, st) for threads, bps in ((256, 2), (256, 4), (512, 2),
                                                                                   (1024, 1)) for st in (False, True)]
    for kernel, threads, blocks, streaming in tqdm(configs, desc="softmax variants", leave=False):
        # the third argument is min_blocks for softmax_rows, blocks_per_sm for the persistent kernel
        run = functools.partial(getattr(fused, kernel), x, threads, blocks, streaming=streaming)
        v_err = relative_error(backend.asnumpy(run())[sample], fused.softmax_reference(x_host[sample]))
        t = timed(run, repeat=100, flush=True)
        variants.append({"kernel": kernel, "threads": threads, "blocks": blocks, "streaming": streaming,
                         "rel_error_sampled_rows": v_err, **t, "bytes_per_s": 2 * x.nbytes / t["median_s"]})
    out["softmax"] = {
        "rows": rows,
        "cols": cols,
        "n_bytes": 2 * x.nbytes,
        "rel_error_sampled_rows": err,
        "fused": {**t_fused, "bytes_per_s": 2 * x.nbytes / t_fused["median_s"]},
        "unfused_cupy": {**t_unfused, "bytes_per_s": 2 * x.nbytes / t_unfused["median_s"]},
        "variants": variants,
    }
    n = 2**28
    x_host = RNG.standard_normal(n, dtype=np.float32)
    x = xp.asarray(x_host)
    got = backend.asnumpy(fused.silu_affine(x)[: 2**22])
    err = relative_error(got, fused.silu_affine_reference(x_host[: 2**22]))
    t_fused = timed(lambda: fused.silu_affine(x), flush=True)
    t_unfused = timed(lambda: fused.silu_affine_unfused(x), flush=True)
    out["silu_affine"] = {
        "n": n,
        "n_bytes": 2 * x.nbytes,
        "rel_error_first_4Mi": err,
        "fused": {**t_fused, "bytes_per_s": 2 * x.nbytes / t_fused["median_s"]},
        "unfused_cupy": {**t_unfused, "bytes_per_s": 2 * x.nbytes / t_unfused["median_s"]},
    }
    total = float(np.sum(x_host, dtype=np.float64))
    got = float(fused.sum_reduce(x))
    t_mine, t_cupy = timed(lambda: fused.sum_reduce(x), flush=True), timed(lambda: x.sum(), flush=True)
    out["sum"] = {
        "n": n,
        "n_bytes": x.nbytes,
        "rel_error": abs(got - total) / abs(total),
        "kernel": {**t_mine, "bytes_per_s": x.nbytes / t_mine["median_s"]},
        "cupy_sum": {**t_cupy, "bytes_per_s": x.nbytes / t_cupy["median_s"]},
    }
    return out


def allocation() -> dict:
    """CuPy's memory pool vs a cudaMalloc + cudaFree per tensor (host-side time per tensor)."""
    xp = backend.xp
    rows = []
    for n_bytes in (4096, MiB, 64 * MiB):
        count = 200
        times = {}
        for label in ("pool", "cudaMalloc"):
            samples = []
            for _ in range(5):
                xp.cuda.Device().synchronize()
                start = time.perf_counter()
                for _ in range(count):
                    if label == "pool":
                        a = xp.empty(n_bytes // 4, dtype=xp.float32)
                        del a
                    else:
                        ptr = xp.cuda.runtime.malloc(n_bytes)
                        xp.cuda.runtime.free(ptr)
                samples.append((time.perf_counter() - start) / count)
            times[label] = float(np.median(samples))
        rows.append(
            {
                "n_bytes": n_bytes,
                "tensors": count,
                "pool_s_per_tensor": times["pool"],
                "cudamalloc_s_per_tensor": times["cudaMalloc"],
            }
        )
    return {"alloc_free": rows}


# ------------------------------------------------------------------------------------------ SGEMM
def measure_sgemm() -> dict:
    xp = backend.xp
    n = 4096
    a_host = RNG.standard_normal((n, n), dtype=np.float32)
    b_host = RNG.standard_normal((n, n), dtype=np.float32)
    reference = a_host.astype(np.float64) @ b_host.astype(np.float64)
    a, b = xp.asarray(a_host), xp.asarray(b_host)
    c = xp.empty((n, n), dtype=xp.float32)
    flop = 2 * n**3
    t = timed(lambda: xp.matmul(a, b, out=c), repeat=30)
    cublas = {**t, "flop_per_s": flop / t["median_s"], "rel_error": relative_error(xp.matmul(a, b), reference)}
    small = [(512, 384, 256), (256, 256, 512)]
    small_inputs = [
        (RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, nn), dtype=np.float32))
        for m, nn, k in small
    ]

    def measure(step: sgemm.SgemmStep, repeat: int) -> dict:
        got = sgemm.sgemm(a, b, step, out=c)
        err = relative_error(got, reference)
        small_errors = [
            relative_error(sgemm.sgemm(xp.asarray(sa), xp.asarray(sb), step), sgemm.sgemm_reference(sa, sb))
            for sa, sb in small_inputs
        ]
        fn = loader.kernel(sgemm.SOURCE, step.expression)
        t = timed(lambda: sgemm.sgemm(a, b, step, out=c), warmup=2, repeat=repeat)
        return {
            **t,
            "step": step.name,
            "kernel": step.expression,
            "idea": step.idea,
            "flop_per_s": flop / t["median_s"],
            "rel_error": err,
            "rel_error_small_shapes": max(small_errors),
            "num_regs": int(fn.num_regs),
            "local_size_bytes": int(fn.local_size_bytes),
            "fraction_of_cublas": cublas["median_s"] / t["median_s"],
        }

    steps = []
    for step in tqdm(list(sgemm.STEPS.values()), desc="sgemm steps"):
        try:
            steps.append(measure(step, repeat=10 if step.name in ("naive", "coalesced", "smem") else 20))
        except Exception as exc:
            traceback.print_exc()
            steps.append({"step": step.name, "error": f"{type(exc).__name__}: {exc}"})
    odd = (RNG.standard_normal((100, 70), dtype=np.float32), RNG.standard_normal((70, 50), dtype=np.float32))
    odd_errors = {
        name: relative_error(
            sgemm.sgemm(xp.asarray(odd[0]), xp.asarray(odd[1]), name), sgemm.sgemm_reference(*odd)
        )
        for name in ("naive", "coalesced", "smem")
    }
    tuning = []
    candidates = [(f, v) for f in ("sgemm_warptile", "sgemm_warptile_db") for v in sgemm.WARPTILE_CANDIDATES]
    for function, values in tqdm(candidates, desc="autotune"):
        if sgemm.warptile_problems(values, function.endswith("_db")):
            continue
        step = sgemm.warptile_step(function.removeprefix("sgemm_"), function, "autotune candidate", values)
        try:
            tuning.append(measure(step, repeat=20))
        except Exception as exc:
            traceback.print_exc()
            tuning.append({"kernel": step.expression, "error": f"{type(exc).__name__}: {exc}"})
    good = [r for r in tuning if "error" not in r and r["rel_error"] < 1e-4]
    best = min(good, key=lambda r: r["median_s"]) if good else None
    return {
        "n": n,
        "flop": flop,
        "cublas": cublas,
        "steps": steps,
        "odd_shape_rel_errors": odd_errors,
        "autotune": tuning,
        "best": best,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON files")
    parser.add_argument("--only", nargs="*", help="sections to run (default: all)")
    args = parser.parse_args(argv)
    if not backend.on_gpu:
        print(f"This benchmark needs a CUDA GPU; {backend.describe()}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    info = device_info()
    print(info, flush=True)
    sms = info["sm_count"]
    sections = {
        "roofline": {"ceilings": lambda: ceilings(sms), "littles_law": lambda: littles(sms)},
        "memory": {
            "global": measure_global,
            "shared": lambda: measure_shared(sms),
            "constant": measure_constant,
            "local": measure_local,
            "fused": measure_fused,
            "allocation": allocation,
            "sgemm": measure_sgemm,
        },
    }
    for file_key, parts in sections.items():
        path = args.out / f"{file_key}_h200.json"
        if args.only and not any(name in parts for name in args.only):
            continue
        results = {}
        if args.only and path.exists():  # a partial run updates the sections it ran, keeps the others
            results = json.loads(path.read_text())
        results.update({"device": info, "script": "benchmarks/memory_gpu.py"})
        for name, fn in parts.items():
            if args.only and name not in args.only:
                continue
            guarded(name, fn, results)
            backend.xp.get_default_memory_pool().free_all_blocks()
            # written after every section: a run cut off keeps what it did
            path.write_text(json.dumps(results, indent=1, default=float))
        print(f"wrote {args.out / f'{file_key}_h200.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
