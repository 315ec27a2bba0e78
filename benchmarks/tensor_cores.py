"""Measure lesson 04's tensor-core kernels on a GPU: the BF16 GEMM ladder and the fused attention forward.

    PYTHONPATH=$PWD python3 benchmarks/tensor_cores.py --out DIR [--quick]

Writes DIR/tensor_cores_h200.json. Every kernel is first checked against its NumPy reference by relative
error on fresh random inputs, then timed with CUDA events after warm-up (median of the timed runs) beside
cuBLAS BF16 (CuPy's matmul on bfloat16 when this CuPy has the dtype, and PyTorch's when PyTorch is
installed: a benchmark comparison only, never a course dependency) and PyTorch's scaled_dot_product_attention
(flash backend). Registers, shared memory and occupancy come from the compiled kernels; bank conflicts of
each shared-memory layout from the course's bank model (memory_hierarchy.tensor_cores). Copy the file
into mlsys_lab/data/ so that learners without a GPU see these figures.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import time
import traceback
from pathlib import Path

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention, fused
from mlsys_lab.memory_hierarchy import tensor_cores
from mlsys_lab.timing import L2_FLUSH_BYTES, benchmark
from mlsys_lab.validation import max_relative_error, relative_error

RNG = np.random.default_rng()  # fresh inputs on every run


def timed(fn, warmup: int = 3, repeat: int = 20, flush: bool = False) -> dict:
    t = benchmark(fn, warmup=warmup, repeat=repeat, flush_bytes=L2_FLUSH_BYTES if flush else 0)
    return {"median_s": t.median, "min_s": t.min, "max_s": t.max, "runs": len(t.samples), "l2_flushed": flush}


def guarded(name: str, fn, results: dict) -> None:
    start = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # one broken kernel must not hide the others
        traceback.print_exc()
        results[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(f"[{name}] {time.perf_counter() - start:.1f} s", flush=True)


def torch_or_none():
    try:
        import torch  # noqa: PLC0415  (benchmark comparison only)

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def random_bf16(*shape: int):
    return backend.xp.asarray(bf16_gemm.to_bf16_bits(RNG.standard_normal(shape, dtype=np.float32)))


# ------------------------------------------------------------------------------------------- GEMM
def gemm_checks() -> dict:
    out = {}
    for name in bf16_gemm.STEPS:
        cases = []
        for m, n, k in ((256, 512, 512), (512, 768, 1024)):
            a, b = random_bf16(m, k), random_bf16(n, k)
            got = bf16_gemm.from_bf16_bits(bf16_gemm.bf16_gemm(a, b, name))
            ref = bf16_gemm.gemm_reference(backend.asnumpy(a), backend.asnumpy(b))
            cases.append({"shape": [m, n, k], "relative_error": relative_error(got, ref),
                          "max_relative_error": max_relative_error(got, ref)})
        out[name] = {"cases": cases, "passed": all(c["relative_error"] < bf16_gemm.RELATIVE_ERROR_BOUND
                                                     for c in cases),
                     "bound": bf16_gemm.RELATIVE_ERROR_BOUND}
        print(name, out[name], flush=True)
    return out


def cublas_bf16(size: int) -> dict:
    """cuBLAS BF16 GEMM (C = A Bᵀ, bf16 out, fp32 accumulate) through CuPy if it has bfloat16, and PyTorch."""
    xp = backend.xp
    flop = 2.0 * size**3
    out = {}
    try:
        import ml_dtypes  # noqa: PLC0415

        a = random_bf16(size, size).view(ml_dtypes.bfloat16)
        b = random_bf16(size, size).view(ml_dtypes.bfloat16)
        t = timed(lambda: xp.matmul(a, b.T), repeat=30)
        out["cupy"] = {**t, "flop_per_s": flop / t["median_s"]}
    except Exception as exc:
        out["cupy"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    torch = torch_or_none()
    if torch is not None:
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda: a @ b.T, repeat=30)
        out["torch"] = {**t, "flop_per_s": flop / t["median_s"], "torch_version": torch.__version__}
    rates = [v["flop_per_s"] for v in out.values() if "flop_per_s" in v]
    out["best_flop_per_s"] = max(rates) if rates else None
    return out


def gemm_timings(sizes: tuple[int, ...]) -> dict:
    out = {}
    for size in sizes:
        baseline = cublas_bf16(size)
        row = {"cublas_bf16": baseline, "steps": {}}
        a, b = random_bf16(size, size), random_bf16(size, size)
        c = backend.xp.empty((size, size), dtype=backend.xp.uint16)
        for name in bf16_gemm.STEPS:
            try:
                t = timed(functools.partial(bf16_gemm.bf16_gemm, a, b, name, out=c), repeat=30)
                rate = 2.0 * size**3 / t["median_s"]
                row["steps"][name] = {**t, "flop_per_s": rate,
                                      "fraction_of_cublas": rate / baseline["best_flop_per_s"]
                                      if baseline["best_flop_per_s"] else None}
            except Exception as exc:
                row["steps"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            print(size, name, row["steps"][name], flush=True)
        out[str(size)] = row
    return out


def gemm_resources() -> dict:
    out = {}
    for name, step in bf16_gemm.STEPS.items():
        passes = tensor_cores.gemm_bank_passes(name)
        entry = {"idea": step.idea, "tile": list(step.tile), "threads": step.threads,
                 "smem_row_bytes": step.smem_row_bytes, "swizzled": step.swizzled,
                 "bank_passes_ldmatrix_phase": passes["ldmatrix"], "bank_passes_tile_store_phase": passes["tile_store"]}
        try:
            entry.update(bf16_gemm.step_resources(step))
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        out[name] = entry
    return out


# -------------------------------------------------------------------------------------- attention
def attention_checks() -> dict:
    out = {}
    for d in flash_attention.HEAD_DIMS:
        for causal in (False, True):
            q, k, v = (random_bf16(2, 2, 384, d) for _ in range(3))
            got = bf16_gemm.from_bf16_bits(flash_attention.flash_attention(q, k, v, causal))
            ref = flash_attention.attention_reference(*(backend.asnumpy(x) for x in (q, k, v)), causal=causal)
            err = relative_error(got, ref)
            out[f"d{d}_{'causal' if causal else 'full'}"] = {
                "relative_error": err, "max_relative_error": max_relative_error(got, ref),
                "passed": err < flash_attention.RELATIVE_ERROR_BOUND, "bound": flash_attention.RELATIVE_ERROR_BOUND}
    print(out, flush=True)
    return out


def attention_row(d: int, causal: bool, seq: int, tokens: int, model_dim: int, torch) -> dict:
    batch, heads = max(tokens // seq, 1), model_dim // d
    flop = flash_attention.attention_flop(batch, heads, seq, d, causal)
    q, k, v = (random_bf16(batch, heads, seq, d) for _ in range(3))
    o = backend.xp.empty_like(q)
    t = timed(functools.partial(flash_attention.flash_attention, q, k, v, causal, out=o), repeat=20, flush=True)
    row = {"batch": batch, "heads": heads, "flash": {**t, "flop_per_s": flop / t["median_s"]}}
    if seq <= 8192:  # the unfused chain's (seq x seq) scores grow past memory beyond
        t = timed(functools.partial(flash_attention.attention_unfused, q, k, v, causal), warmup=1, repeat=5)
        row["unfused_cupy_fp32"] = {**t, "flop_per_s": flop / t["median_s"]}
    del q, k, v, o
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

        tq, tk, tv = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        def sdpa():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

        t = timed(sdpa, repeat=20, flush=True)
        row["sdpa_flash"] = {**t, "flop_per_s": flop / t["median_s"]}
        row["fraction_of_sdpa"] = row["flash"]["flop_per_s"] / row["sdpa_flash"]["flop_per_s"]
    return row


def attention_timings(seqs: tuple[int, ...], tokens: int = 16384, model_dim: int = 2048) -> dict:
    """Batch x seq = ``tokens``, heads x d = ``model_dim`` (FlashAttention's benchmark convention)."""
    torch = torch_or_none()
    out = {}
    for d in flash_attention.HEAD_DIMS:
        for causal in (False, True):
            rows = {}
            for seq in seqs:
                try:
                    rows[str(seq)] = row = attention_row(d, causal, seq, tokens, model_dim, torch)
                    print(d, causal, seq, {key: (val.get("flop_per_s", 0) / 1e12 if isinstance(val, dict) else val)
                                            for key, val in row.items()}, flush=True)
                except Exception as exc:
                    rows[str(seq)] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                    traceback.print_exc()
            out[f"d{d}_{'causal' if causal else 'full'}"] = rows
    return out


def attention_resources() -> dict:
    out = {}
    for d in flash_attention.HEAD_DIMS:
        for causal in (False, True):
            entry = flash_attention.kernel_resources(d, causal)
            words = flash_attention.attention_ldmatrix_words(d)
            entry["bank_passes_ldmatrix_phase"] = tensor_cores.passes_of_phases(words)
            out[f"d{d}_{'causal' if causal else 'full'}"] = entry
    return out


# -------------------------------------------------------------------------------- launch overhead
def host_seconds_per_call(fn, calls: int = 300) -> float:
    """Host time of one launcher call (the launch is asynchronous: this is what leaves the GPU idle when
    calls are timed one by one)."""
    for _ in range(10):
        fn()
    backend.sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - start) / calls
    backend.sync()
    return seconds


def queued_seconds(fn, launches: int = 20, repeat: int = 10) -> float:
    """Device time per call with ``launches`` calls queued between two events (host work hidden)."""
    xp = backend.xp
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    samples = []
    for _ in range(repeat):
        start.record()
        for _ in range(launches):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(xp.cuda.get_elapsed_time(start, stop) / 1e3 / launches)
    return float(np.median(samples))


def launch_overhead(rounds: int = 15, calls: int = 200) -> dict:
    """Host seconds per launcher call (cached plans), and what they cost a kernel timed call by call.

    The host cost of a call wanders by a few microseconds from run to run (CPU frequency, other tenants), so
    the launchers and a raw CuPy launch of the same kernel are timed in ``rounds`` interleaved rounds of
    ``calls`` calls each; each figure is the median over the rounds, and ``above_raw`` is the median of
    each round's difference to the raw launch (a ``cupy.RawKernel`` call of the same GEMM kernel); a negative
    figure is host work saved. ``packed_launch_host_s`` is the launch alone through the course's
    :class:`~mlsys_lab.kernels.launch.PackedLaunch` (the driver's ``cuLaunchKernel`` on pre-packed arguments).
    """
    a, b = random_bf16(256, 256), random_bf16(256, 256)
    c = backend.xp.empty((256, 256), dtype=backend.xp.uint16)
    q = random_bf16(1, 1, 128, 64)
    o = backend.xp.empty_like(q)
    x = backend.xp.asarray(RNG.standard_normal((64, 1024), dtype=np.float32))
    y_small = backend.xp.empty_like(x)
    step = bf16_gemm.STEPS["pipeline"]
    fn, grid, block, smem = bf16_gemm._compiled(step), step.grid(256, 256), (step.threads,), step.dynamic_smem_bytes
    scalars = (np.int32(256),) * 3
    packed = bf16_gemm._plan("pipeline", bf16_gemm._layout(a), bf16_gemm._layout(b), bf16_gemm._layout(c))[0]
    launchers = {
        "raw_cupy_launch_host_s": lambda: fn(grid, block, (a, b, c) + scalars, shared_mem=smem),
        "packed_launch_host_s": lambda: packed(a, b, c),
        "bf16_gemm_pipeline_host_s": lambda: bf16_gemm.bf16_gemm(a, b, "pipeline", out=c),
        "bf16_gemm_wgmma_host_s": lambda: bf16_gemm.bf16_gemm(a, b, "wgmma", out=c),
        "flash_attention_host_s": lambda: flash_attention.flash_attention(q, q, q, out=o),
        "fused_softmax_rows_host_s": lambda: fused.softmax_rows(x, out=y_small),
    }
    samples: dict[str, list[float]] = {key: [] for key in launchers}
    for _ in range(rounds):
        for key, launch in launchers.items():
            samples[key].append(host_seconds_per_call(launch, calls))
    raw = np.array(samples["raw_cupy_launch_host_s"])
    out: dict = {key: float(np.median(s)) for key, s in samples.items()}
    out["above_raw"] = {key: float(np.median(np.array(s) - raw)) for key, s in samples.items()
                        if key != "raw_cupy_launch_host_s"}
    out["spread"] = {key: [float(np.min(s)), float(np.max(s))] for key, s in samples.items()}
    out["rounds"], out["calls_per_round"] = rounds, calls
    big = backend.xp.asarray(RNG.standard_normal((16384, 4096), dtype=np.float32))
    y = backend.xp.empty_like(big)
    n_bytes = 2 * big.nbytes
    copy_s = queued_seconds(lambda: backend.xp.copyto(y, big))
    one_by_one = timed(lambda: fused.softmax_rows(big, out=y), repeat=30)["median_s"]
    queued = queued_seconds(lambda: fused.softmax_rows(big, out=y))
    out["softmax_16384x4096"] = {
        "copy_bandwidth_bytes_per_s": n_bytes / copy_s,
        "call_by_call_fraction_of_copy": copy_s / one_by_one, "queued_20_fraction_of_copy": copy_s / queued,
        "call_by_call_s": one_by_one, "queued_s": queued}
    return out


def environment() -> dict:
    xp = backend.xp
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    torch = torch_or_none()
    return {"device": name, "compute_capability": xp.cuda.Device().compute_capability,
            "sm_count": backend.sm_count(),
            "cupy_version": xp.__version__, "cuda_runtime_version": xp.cuda.runtime.runtimeGetVersion(),
            "cuda_driver_version": xp.cuda.runtime.driverGetVersion(),
            "nvrtc_version": list(xp.cuda.nvrtc.getVersion()),
            "torch_version": torch.__version__ if torch is not None else None,
            "date": datetime.date.today().isoformat()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true", help="one GEMM size and three sequence lengths")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    args = parser.parse_args()
    if not backend.on_gpu:
        raise SystemExit(f"needs a GPU: {backend.describe()}")
    results: dict = {"script": "benchmarks/tensor_cores.py", **environment(),
                     "gemm_layout": "C = A Bᵀ, A (M, K), B (N, K), bf16 in and out, fp32 accumulation"}
    skip = set(args.skip.split(","))
    sections = {
        "gemm_correctness": gemm_checks,
        "gemm_resources": gemm_resources,
        "attention_correctness": attention_checks,
        "attention_resources": attention_resources,
        "gemm_timing": lambda: gemm_timings((8192,) if args.quick else (4096, 8192)),
        "attention_timing": lambda: attention_timings((1024, 4096, 16384) if args.quick
                                                      else (1024, 2048, 4096, 8192, 16384)),
        "launch_overhead": launch_overhead,
    }
    for name, fn in sections.items():
        if name not in skip:
            guarded(name, fn, results)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "tensor_cores_h200.json"
    path.write_text(json.dumps(results, indent=1, default=float) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
