"""Measure the Hopper kernels on an H100/H200: the FP8 block-scaled GEMM, the attention forward on wgmma and its
backward (benchmarks/attention_backward.py), all in one run.

    PYTHONPATH=$PWD python3 benchmarks/hopper_kernels.py --out DIR [--quick]

Writes DIR/hopper_kernels_h200.json (or _h100.json on an H100). Each kernel is first checked on fresh random
inputs: the FP8 GEMM against
the float64 product of its dequantized inputs, elementwise within the derived error bound
(:func:`mlsys_lab.training_memory.fp8_gemm.fp8_gemm_error_bound`, plus C's bf16 rounding); the attention forward
against the float32 NumPy reference (O by relative error, LSE by absolute error). Then each is timed with CUDA
events after warm-up, interleaved with the others in rounds (median of all runs), beside its anchor in the same
process: ``torch._scaled_mm`` (cuBLASLt FP8, one
scale per tensor) for the GEMM, PyTorch's scaled_dot_product_attention with its cuDNN and flash backends for
attention (PyTorch is a benchmark comparison only, never a course dependency), and the course's own previous
steps (the BF16 wgmma GEMM, the FlashAttention-2 kernel). Copy the file into mlsys_lab/data/.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks.attention_backward import backward_checks, backward_resources, backward_row
from benchmarks.tensor_cores import random_bf16, torch_or_none  # the same inputs and anchor as the BF16 ladder
from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.launch import PackedLaunch
from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention, flash_attention_hopper, fp8_block_gemm
from mlsys_lab.kernels.memory_hierarchy.flash_attention_backward import attention_forward_lse
from mlsys_lab.kernels.tma import tensor_map
from mlsys_lab.timing import L2_FLUSH_BYTES, benchmark
from mlsys_lab.training_memory.fp8 import dequantize_fp8_blocks, quantize_fp8_blocks
from mlsys_lab.training_memory.fp8_gemm import fp8_gemm_error_bound
from mlsys_lab.validation import max_relative_error, relative_error

RNG = np.random.default_rng()


def interleaved(fns: dict, flop: float, rounds: int = 8, repeat: int = 5, flush: bool = False) -> dict:
    """Time several kernels in ``rounds`` interleaved rounds of ``repeat`` runs each, in an order shuffled every
    round, and report each one's median over all its runs: a GPU that heats up and lowers its clocks during the
    benchmark then slows every kernel alike (timed one after the other, identical kernels measured up to 15% apart
    on the H100; in a fixed order, 5% apart at sequence 16384 on the H200)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up: compile, first launch
        benchmark(fn, warmup=2, repeat=1)
    order = list(fns)
    shuffle = np.random.default_rng(0)
    for _ in range(rounds):  # a new order each round: no kernel always follows the slowest (hottest) one
        shuffle.shuffle(order)
        for name in order:
            samples[name] += benchmark(fns[name], warmup=1, repeat=repeat,
                                       flush_bytes=L2_FLUSH_BYTES if flush else 0).samples
    return {name: {"median_s": float(np.median(t)), "min_s": float(np.min(t)), "max_s": float(np.max(t)),
                   "runs": len(t), "rounds": rounds, "l2_flushed": flush, "flop_per_s": flop / float(np.median(t))}
            for name, t in samples.items()}


def guarded(name: str, fn, results: dict, save=None) -> None:
    """results[name] = fn(), or the error it raised; then ``save(results)`` (a run cut short keeps what it did)."""
    start = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # one broken kernel must not hide the others
        traceback.print_exc()
        results[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(f"[{name}] {time.perf_counter() - start:.1f} s", json.dumps(results[name], default=str)[:3000], flush=True)
    if save is not None:
        save(results)


# ------------------------------------------------------------------------------------------ FP8 GEMM
# What each step adds: the block width; the warp groups' ping-pong; promoting while the next interval runs (one
# warp group, two temporaries); a persistent grid; TMA multicast of B's tile to a cluster of two.
FP8_VARIANTS = {
    "bn128": {"FP8_BN": 128, "FP8_PIPELINE": 0, "FP8_PINGPONG": 0},
    "bn128_pipelined": {"FP8_BN": 128, "FP8_PIPELINE": 1, "FP8_PINGPONG": 0},
    "bn128_pipelined_persistent": {"FP8_BN": 128, "FP8_PIPELINE": 1, "FP8_PINGPONG": 0, "persistent": True},
    "bn128_pipelined_multicast": {"FP8_BN": 128, "FP8_PIPELINE": 1, "FP8_PINGPONG": 0, "FP8_MULTICAST": 1,
                                  "persistent": True},
    "bn128_pingpong": {"FP8_BN": 128, "FP8_PIPELINE": 0, "FP8_PINGPONG": 1},
    "bn256": {"FP8_BN": 256, "FP8_PINGPONG": 0},
    "bn256_persistent": {"FP8_BN": 256, "FP8_PINGPONG": 0, "persistent": True},
    "bn256_pingpong": {"FP8_BN": 256, "FP8_PINGPONG": 1},
    "bn256_multicast": {"FP8_BN": 256, "FP8_PINGPONG": 0, "FP8_MULTICAST": 1},  # clusters of 2 share B's tile
}


def fp8_variant(variant: dict):
    defines = {name: value for name, value in variant.items() if name != "persistent"}
    block_n = defines["FP8_BN"]
    fn = loader.kernel(fp8_block_gemm.SOURCE, "fp8_block_gemm", defines, arch="sm_90a")
    fn.max_dynamic_shared_size_bytes = fp8_block_gemm.fp8_gemm_smem_bytes(block_n)

    def run(a, sa, b, sb, out):
        m, k = a.shape
        n = b.shape[0]
        grid = fp8_block_gemm.fp8_gemm_grid(m, n, block_n, variant.get("persistent", False), backend.sm_count())
        PackedLaunch(fn, (grid,), (384,), fp8_block_gemm.fp8_gemm_smem_bytes(block_n), 5,
                     (np.int32(m), np.int32(n), np.int32(k)))(
            tensor_map(a, 128), tensor_map(b, block_n // (2 if defines.get("FP8_MULTICAST") else 1)),
            backend.xp.ascontiguousarray(sa.T), sb, out)
        return out
    return run, fn


def fp8_checks(name: str) -> dict:
    xp = backend.xp
    run, fn = fp8_variant(FP8_VARIANTS[name])
    cases = []
    # even row tiles (clusters of 2); the last has 288 tiles of 128 x 128 or 144 of 256: a persistent block runs 2-3
    for m, n, k in ((256, 256, 512), (512, 512, 1024), (256, 768, 4096), (2048, 2304, 384)):
        a = RNG.standard_normal((m, k)).astype(np.float32)
        a[:, RNG.integers(0, k, size=3)] *= 50.0  # outlier channels, what the 1 x 128 scales are for
        b = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
        qa, qb = quantize_fp8_blocks(a, 1, 128), quantize_fp8_blocks(b, 128, 128)
        got = bf16_gemm.from_bf16_bits(run(xp.asarray(qa.codes), xp.asarray(qa.scales), xp.asarray(qb.codes),
                                           xp.asarray(qb.scales), xp.empty((m, n), dtype=xp.uint16)))
        exact = dequantize_fp8_blocks(qa) @ dequantize_fp8_blocks(qb).T
        bound = fp8_gemm_error_bound(qa, qb) + fp8_block_gemm.BF16_UNIT_ROUNDOFF * np.abs(exact)
        excess = np.abs(got - exact) / bound
        cases.append({"shape": [m, n, k], "relative_error": relative_error(got, exact),
                      "max_error_over_bound": float(excess.max()), "within_bound": bool((excess <= 1).all())})
    return {"cases": cases, "passed": all(c["within_bound"] and c["relative_error"] < 1e-2 for c in cases),
            "resources": bf16_gemm.occupancy_record(
                fn, 384, fp8_block_gemm.fp8_gemm_smem_bytes(FP8_VARIANTS[name]["FP8_BN"]))}


def random_codes(rows: int, cols: int):
    """E4M3 codes of random values of both signs (every finite code but NaN's), uniformly."""
    xp = backend.xp
    magnitude = xp.asarray(RNG.integers(0, 0x7E, size=(rows, cols), dtype=np.uint8))
    sign = xp.asarray((RNG.integers(0, 2, size=(rows, cols), dtype=np.uint8) << 7).astype(np.uint8))
    return magnitude | sign


def fp8_timings(size: int, torch) -> dict:
    xp = backend.xp
    flop = 2.0 * size**3
    a, b = random_codes(size, size), random_codes(size, size)
    sa = xp.asarray(RNG.uniform(0.5, 2.0, (size, size // 128)).astype(np.float32))
    sb = xp.asarray(RNG.uniform(0.5, 2.0, (size // 128, size // 128)).astype(np.float32))
    c = xp.empty((size, size), dtype=xp.uint16)
    x, y = random_bf16(size, size), random_bf16(size, size)
    fns = {name: functools.partial(fp8_variant(defines)[0], a, sa, b, sb, c) for name, defines in FP8_VARIANTS.items()}
    fns["course_default"] = functools.partial(fp8_block_gemm.fp8_block_gemm_on_gpu, a, sa, b, sb, out=c)
    fns["course_bf16_wgmma"] = functools.partial(bf16_gemm.bf16_gemm, x, y, "wgmma", out=c)
    if torch is not None:  # cuBLASLt FP8, e4m3 x e4m3 -> bf16: one scale per tensor (the anchor), one per row
        ta = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        tb = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        rows, cols = torch.rand(size, 1, device="cuda") + 0.5, torch.rand(1, size, device="cuda") + 0.5
        fns["scaled_mm_per_tensor"] = lambda: torch._scaled_mm(ta, tb.t(), scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16)
        fns["scaled_mm_rowwise"] = lambda: torch._scaled_mm(ta, tb.t(), scale_a=rows, scale_b=cols,
                                                            out_dtype=torch.bfloat16)
    row = {"size": size, **interleaved(fns, flop)}
    if torch is not None:
        row["scaled_mm"] = {"per_tensor": row.pop("scaled_mm_per_tensor"), "rowwise": row.pop("scaled_mm_rowwise")}
        anchor = row["scaled_mm"]["per_tensor"]["median_s"]
        row["fraction_of_scaled_mm"] = {name: anchor / row[name]["median_s"]
                                        for name in (*FP8_VARIANTS, "course_default")}
    return row


# ------------------------------------------------------------------------------------ attention
def variant_launch(d: int, causal: bool, defines: dict):
    fn = loader.kernel(flash_attention_hopper.SOURCE, "flash_attention_hopper",
                       {"HEAD_DIM": d, "CAUSAL": int(causal), **defines}, arch="sm_90a")
    smem = flash_attention_hopper.hopper_attention_smem_bytes(d, defines.get("H_STAGES"))
    fn.max_dynamic_shared_size_bytes = smem

    def run(q, k, v, out, lse):
        b, h, s, _ = q.shape
        maps = [tensor_map(x.reshape(b * h * s, d), 128) for x in (q, k, v)]
        PackedLaunch(fn, (s // 128, b * h), (384,), smem, 5,
                     (np.int32(s), np.float32(math.log2(math.e) / math.sqrt(d))))(*maps, out, lse)
        return out, lse
    return run


def attention_check(run, d: int, causal: bool) -> dict:
    q, k, v = (random_bf16(2, 3, 384, d) for _ in range(3))
    out, lse = backend.xp.empty_like(q), backend.xp.empty(q.shape[:3], dtype=backend.xp.float32)
    run(q, k, v, out, lse)
    hq, hk, hv = (bf16_gemm.from_bf16_bits(backend.asnumpy(x)) for x in (q, k, v))
    ref_o, ref_lse = attention_forward_lse(hq.astype(np.float64), hk.astype(np.float64), hv.astype(np.float64),
                                           causal=causal)
    got = bf16_gemm.from_bf16_bits(out)
    err = relative_error(got, ref_o)
    lse_err = float(np.abs(backend.asnumpy(lse) - ref_lse).max())
    return {"relative_error": err, "max_relative_error": max_relative_error(got, ref_o), "lse_max_abs_error": lse_err,
            "passed": err < flash_attention.RELATIVE_ERROR_BOUND and lse_err < 1e-2}


ATTENTION_VARIANTS = {  # each relative to the head dimension's default (d 128: 3 stages, ping-pong; d 64: 4, none)
    "two_stages": {"H_STAGES": 2},
    "pingpong_off": {"FA_PINGPONG": 0},
    "pingpong_on": {"FA_PINGPONG": 1},
    "default": {},
}


def attention_checks() -> dict:
    out = {}
    for name, defines in ATTENTION_VARIANTS.items():
        for d in flash_attention_hopper.HEAD_DIMS:
            for causal in (False, True):
                key = f"{name}_d{d}_{'causal' if causal else 'full'}"
                try:
                    out[key] = attention_check(variant_launch(d, causal, defines), d, causal)
                except Exception as exc:
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                print(key, out[key], flush=True)
    return out


def attention_row(d: int, causal: bool, seq: int, batch: int, heads: int, torch, variants: dict) -> dict:
    flop = flash_attention.attention_flop(batch, heads, seq, d, causal)
    q, k, v = (random_bf16(batch, heads, seq, d) for _ in range(3))
    o, lse = backend.xp.empty_like(q), backend.xp.empty((batch, heads, seq), dtype=backend.xp.float32)
    fns = {f"hopper_{name}": functools.partial(variant_launch(d, causal, defines), q, k, v, o, lse)
           for name, defines in variants.items()}
    fns["fa2_course"] = functools.partial(flash_attention.flash_attention, q, k, v, causal, out=o)
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

        tq, tk, tv = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for label, which in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            def sdpa(which=which):
                with sdpa_kernel(which):
                    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            fns[label] = sdpa
    row = {"batch": batch, "heads": heads, **interleaved(fns, flop, rounds=8, repeat=4, flush=True)}
    if "sdpa_cudnn" in row and "hopper_default" in row:
        row["fraction_of_cudnn"] = row["sdpa_cudnn"]["median_s"] / row["hopper_default"]["median_s"]
    return row


def sweep(row, seqs, head_dims=(128, 64)) -> dict:
    """``row(d, causal, seq, batch, heads, torch)`` at every head dimension, mask and sequence length, B 4 and
    2048 / d heads (the FlashAttention papers' shapes); an error in one shape is recorded and the rest still run."""
    torch = torch_or_none()
    out = {}
    for d in head_dims:
        for causal in (False, True):
            for seq in seqs:
                key = f"d{d}_{'causal' if causal else 'full'}_{seq}"
                try:
                    out[key] = row(d, causal, seq, 4, 2048 // d, torch)
                except Exception as exc:
                    traceback.print_exc()
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                print(key, {k: (v.get("flop_per_s", 0) / 1e12 if isinstance(v, dict) else v)
                            for k, v in out[key].items()}, flush=True)
    return out


def resources() -> dict:
    out = {}
    for n in fp8_block_gemm.BLOCK_NS:
        out[f"fp8_bn{n}"] = fp8_block_gemm.fp8_gemm_resources(n)
    for d in flash_attention_hopper.HEAD_DIMS:
        for causal in (False, True):
            key = f"attention_d{d}_{'causal' if causal else 'full'}"
            out[key] = flash_attention_hopper.hopper_attention_resources(d, causal)
    return out


def environment() -> dict:
    xp = backend.xp
    device = xp.cuda.Device()
    torch = torch_or_none()
    return {"device": xp.cuda.runtime.getDeviceProperties(device.id)["name"].decode(),
            "compute_capability": device.compute_capability, "cupy_version": xp.__version__,
            "torch_version": torch.__version__ if torch else None,
            "date": datetime.date.today().isoformat()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one sequence length, head dimension 128 only")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128, 64], choices=[128, 64],
                        help="head dimensions of the attention rows (the targets name 128)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(FP8_VARIANTS),
                        help="FP8 variants to leave out (one that failed or hung in a probe run)")
    args = parser.parse_args()
    for name in args.skip:
        del FP8_VARIANTS[name]
    results: dict = {"script": "benchmarks/hopper_kernels.py", **environment()}
    print(results, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"hopper_kernels_{'h200' if 'H200' in results['device'] else 'h100'}.json"

    def step(name, fn):
        guarded(name, fn, results, lambda r: path.write_text(json.dumps(r, indent=1, default=str)))

    step("resources", resources)
    for name in FP8_VARIANTS:
        step(f"fp8_check_{name}", functools.partial(fp8_checks, name))
    step("fp8_8192", functools.partial(fp8_timings, 8192, torch_or_none()))
    step("attention_checks", attention_checks)
    checks = results["attention_checks"]
    variants = {name: defines for name, defines in ATTENTION_VARIANTS.items()
                if all(checks.get(f"{name}_d128_{m}", {}).get("passed") for m in ("full", "causal"))}
    results["timed_variants"] = list(variants)
    seqs, head_dims = ((4096,), (128,)) if args.quick else ((4096, 16384), tuple(args.head_dims))
    step("backward_resources", backward_resources)
    step("backward_checks", backward_checks)
    backward_ok = all(isinstance(check, dict) and check.get("passed") for check in results["backward_checks"].values())
    for d in head_dims:  # d = 128 first, forward and backward: the shapes the targets name, should time run out
        if variants:
            step("attention", lambda d=d: {**results.get("attention", {}), **sweep(
                functools.partial(attention_row, variants=variants), seqs, (d,))})
        if backward_ok:
            step("attention_backward", lambda d=d: {**results.get("attention_backward", {}), **sweep(
                functools.partial(backward_row, interleaved=interleaved), seqs, (d,))})


if __name__ == "__main__":
    main()
