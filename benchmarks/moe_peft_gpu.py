"""Record the GPU figures lessons 10 and 11 quote: MoE expert loop vs grouped GEMM, and LoRA/adapter latency.

Run on a GPU machine from the repository root:

    python benchmarks/moe_peft_gpu.py OUT_DIR [all|peft|moe|kernel|batched]

It writes OUT_DIR/moe_grouped_gemm.json, moe_grouped_kernel.json, moe_batched_matmul.json and peft_latency.json
(device name, date, medians of CUDA-event timings after warm-up); copy them to mlsys_lab/data/ with the
device in the name.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import numpy as np

from mlsys_lab import backend
from mlsys_lab.backend import xp
from mlsys_lab.kernels.moe.expert_ffn import (
    expert_slots,
    moe_ffn_grouped,
    moe_ffn_grouped_kernel,
    moe_ffn_loop,
    moe_ffn_padded_batched,
)
from mlsys_lab.moe.gating import top_k_gating
from mlsys_lab.peft.finetune import inference_variants
from mlsys_lab.timing import L2_FLUSH_BYTES, benchmark
from mlsys_lab.validation import max_relative_error

MOE_LAYERS = {  # name: (n_experts, top_k, d_model, d_ff)
    "Mixtral-8x7B-like (8 experts, top-2, 4096x14336)": (8, 2, 4096, 14336),
    "DeepSeek-V2-Lite-like (64 experts, top-6, 2048x1408)": (64, 6, 2048, 1408),
    "DeepSeek-V3-like (256 experts, top-8, 7168x2048)": (256, 8, 7168, 2048),
}
TOKENS = (16, 128, 1024, 8192)


def header() -> dict:
    return {"device": backend._selection.device, "backend": backend.describe(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _normal(shape):
    if backend.on_gpu:  # CuPy draws float32 directly; NumPy's legacy generator has no dtype argument
        return xp.random.standard_normal(shape, dtype=xp.float32)
    return xp.random.standard_normal(shape).astype(xp.float32)


def device_routing(n_tokens: int, n_experts: int, top_k: int, d_model: int, d_ff: int, dtype, seed: int = 1):
    """Like mlsys_lab.moe.synthetic.random_routing, but drawn on the device: a 256-expert layer's weights are 15 GB."""
    xp.random.seed(seed)
    idx, gate = top_k_gating(_normal((n_tokens, n_experts)), top_k)
    gate = gate.astype(dtype)
    x = _normal((n_tokens, d_model)).astype(dtype)
    w1 = (_normal((n_experts, d_model, d_ff)) * d_model**-0.5).astype(dtype)
    w2 = (_normal((n_experts, d_ff, d_model)) * d_ff**-0.5).astype(dtype)
    return x, idx, gate, w1, w2


def batched_gemms_only(x, idx, gate, w1, w2):
    """The padded path's two batched GEMMs alone, on an already packed buffer (to see where time goes)."""
    slot, counts = expert_slots(idx, w1.shape[0])
    buf = xp.zeros((w1.shape[0], int(counts.max()), x.shape[1]), x.dtype)
    return lambda: xp.matmul(xp.maximum(xp.matmul(buf, w1), 0), w2)


def moe_cases(dtype):
    """(row fields, inputs) for every layer and batch size the MoE records cover; the 256-expert layer only
    up to 128 tokens (its loop is slow to repeat; two batch sizes show the trend). Frees the inputs after."""
    for name, (n_experts, top_k, d_model, d_ff) in MOE_LAYERS.items():
        for n_tokens in TOKENS:
            if n_experts >= 256 and n_tokens > 128:
                continue
            fields = {"layer": name, "n_experts": n_experts, "top_k": top_k, "d_model": d_model, "d_ff": d_ff,
                      "n_tokens": n_tokens, "dtype": np.dtype(dtype).name,
                      "useful_flop": 2 * 2 * n_tokens * top_k * d_model * d_ff}
            yield fields, device_routing(n_tokens, n_experts, top_k, d_model, d_ff, dtype)
            if backend.on_gpu:
                xp.get_default_memory_pool().free_all_blocks()


def moe_rows(partial_file: Path | None = None) -> list[dict]:
    """Loop vs grouped vs padded-batched per layer and batch; rewrites ``partial_file`` after each row."""
    rows = []
    for fields, args in moe_cases(np.float16 if backend.on_gpu else np.float32):
        loop = moe_ffn_loop(*args)
        rel_err = max_relative_error(moe_ffn_grouped(*args), loop)
        rel_err_padded = max_relative_error(moe_ffn_padded_batched(*args), loop)
        t_loop = benchmark(lambda a=args: moe_ffn_loop(*a), warmup=2, repeat=10)
        t_grouped = benchmark(lambda a=args: moe_ffn_grouped(*a), warmup=3, repeat=10)
        t_padded = benchmark(lambda a=args: moe_ffn_padded_batched(*a), warmup=2, repeat=10)
        t_gemms = benchmark(batched_gemms_only(*args), warmup=2, repeat=10)
        rows.append({**fields, "loop_seconds": t_loop.median, "grouped_seconds": t_grouped.median,
                     "padded_batched_seconds": t_padded.median, "batched_gemms_only_seconds": t_gemms.median,
                     "rel_err": rel_err, "rel_err_padded": rel_err_padded})
        print(f"{fields['layer']} T={fields['n_tokens']}: loop {t_loop} grouped {t_grouped} padded batched "
              f"{t_padded} (its GEMMs alone {t_gemms}) rel_err {rel_err:.2e}", flush=True)
        if partial_file is not None:
            partial_file.write_text(json.dumps({**header(), "rows": rows}, indent=1))
        del args  # the last reference: moe_cases frees the device memory before the next layer
    return rows


def kernel_rows() -> list[dict]:
    """The grouped schedule (2n cuBLAS launches) against the one-launch grouped-GEMM kernel, same inputs."""
    rows = []
    for fields, args in moe_cases(np.float16):
        rel_err = max_relative_error(moe_ffn_grouped_kernel(*args), moe_ffn_grouped(*args))
        t_grouped = benchmark(lambda a=args: moe_ffn_grouped(*a), warmup=3, repeat=10)
        t_kernel = benchmark(lambda a=args: moe_ffn_grouped_kernel(*a), warmup=3, repeat=10)
        rows.append({**fields, "grouped_seconds": t_grouped.median, "grouped_kernel_seconds": t_kernel.median,
                     "rel_err_vs_grouped": rel_err})
        print(f"{fields['layer']} T={fields['n_tokens']}: grouped {t_grouped} kernel {t_kernel} "
              f"rel_err {rel_err:.2e}", flush=True)
        del args  # the last reference: moe_cases frees the device memory before the next layer
    return rows


def batched_vs_2d_rows() -> list[dict]:
    """One weight's GEMM of a padded (n, C, d) @ (n, d, f) MoE buffer: one strided-batched matmul
    against n 2-D matmuls into slices of the same output, same inputs, L2 flushed before each run."""
    rows = []
    dtype = np.float16 if backend.on_gpu else np.float32
    for n, c, d, f in ((8, 2200, 4096, 14336), (8, 8, 4096, 14336), (64, 200, 2048, 1408), (256, 40, 7168, 2048)):
        buf = _normal((n, c, d)).astype(dtype)
        w = (_normal((n, d, f)) * d**-0.5).astype(dtype)
        out = xp.empty((n, c, f), dtype)

        def two_d(buf=buf, w=w, out=out):
            for e in range(buf.shape[0]):
                xp.matmul(buf[e], w[e], out=out[e])
            return out

        rel_err = max_relative_error(two_d(), xp.matmul(buf, w))
        flush = L2_FLUSH_BYTES
        t_batched = benchmark(lambda buf=buf, w=w, out=out: xp.matmul(buf, w, out=out), warmup=3, repeat=10,
                              flush_bytes=flush)
        t_2d = benchmark(two_d, warmup=3, repeat=10, flush_bytes=flush)
        rows.append({"n": n, "C": c, "d": d, "f": f, "dtype": np.dtype(dtype).name, "flop": 2 * n * c * d * f,
                     "batched_seconds": t_batched.median, "two_d_seconds": t_2d.median, "rel_err": rel_err})
        print(rows[-1], flush=True)
        del buf, w, out
    return rows


def peft_rows() -> list[dict]:
    rows = []
    for n_tokens in (1, 16, 256, 4096):
        fns = inference_variants(d_model=4096, n_tokens=n_tokens, rank=16)
        row = {"d_model": 4096, "rank": 16, "n_tokens": n_tokens, "dtype": "float32"}
        for name, fn in fns.items():
            row[name + " seconds"] = benchmark(fn, warmup=5, repeat=50).median
        rows.append(row)
        print(row, flush=True)
    return rows


def main(out_dir: str, which: str = "all") -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(backend.describe(), flush=True)
    if which in ("all", "peft"):
        (out / "peft_latency.json").write_text(json.dumps({**header(), "rows": peft_rows()}, indent=1))
    if which in ("all", "moe"):
        moe_rows(out / "moe_grouped_gemm.json")
    if which in ("all", "kernel"):
        (out / "moe_grouped_kernel.json").write_text(json.dumps({**header(), "rows": kernel_rows()}, indent=1))
    if which in ("all", "batched"):
        (out / "moe_batched_matmul.json").write_text(json.dumps({**header(), "rows": batched_vs_2d_rows()},
                                                                indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".", sys.argv[2] if len(sys.argv) > 2 else "all")
