"""Record lesson 06's GPU figures: weight-only int8 matmul vs cuBLAS, engine memory, checkpointing sweep.

Run on a CUDA machine (CuPy backend):  python benchmarks/training_memory_gpu.py
Writes mlsys_lab/data/training_memory_gpu.json (device name, date, every figure), which the notebook
shows when it runs on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mlsys_lab import backend
from mlsys_lab.kernels.training_memory.int8_matmul import int8_weight_matmul, int8_weight_matmul_reference
from mlsys_lab.nn import Adam
from mlsys_lab.timing import L2_FLUSH_BYTES, benchmark
from mlsys_lab.training_memory.accounting import measure_peak_bytes, mlp_step_bytes
from mlsys_lab.training_memory.quantize import quantize
from mlsys_lab.training_memory.recompute import checkpoint_sweep, forward_backward
from mlsys_lab.training_memory.training import make_mlp, random_batch, train_mlp_step
from mlsys_lab.validation import relative_error

OUT = Path(__file__).resolve().parents[1] / "mlsys_lab" / "data" / "training_memory_gpu.json"


def int8_matmul_row(xp, generator, m: int, n: int, k: int) -> dict:
    """One shape: check the kernel against the NumPy reference, then time it beside cuBLAS fp16/fp32."""
    w = generator.standard_normal((n, k), dtype=np.float32) * 0.02
    q = quantize(w, 8, "symmetric", "channel")
    codes, scales = q.codes.astype(np.int8), q.scales[:, 0]
    x = generator.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    d_x, d_codes, d_scales = xp.asarray(x), xp.asarray(codes), xp.asarray(scales)
    w16, w32 = xp.asarray(w.astype(np.float16)), xp.asarray(w)
    x32 = d_x.astype(xp.float32)
    got = backend.asnumpy(int8_weight_matmul(d_x, d_codes, d_scales)).astype(np.float32)
    error = relative_error(got, int8_weight_matmul_reference(x.astype(np.float32), codes, scales))
    first = backend.asnumpy(int8_weight_matmul(d_x, d_codes, d_scales, k_unroll=1, max_m=16)).astype(np.float32)
    error_first = relative_error(first, int8_weight_matmul_reference(x.astype(np.float32), codes, scales))
    flush = L2_FLUSH_BYTES  # cold L2 and no host gap inside the timed window (mlsys_lab.timing.benchmark)
    t_int8 = benchmark(lambda: int8_weight_matmul(d_x, d_codes, d_scales), warmup=5, repeat=50, flush_bytes=flush)
    t_first = benchmark(lambda: int8_weight_matmul(d_x, d_codes, d_scales, k_unroll=1, max_m=16), warmup=5,
                        repeat=50, flush_bytes=flush)
    t_fp16 = benchmark(lambda: d_x @ w16.T, warmup=5, repeat=50, flush_bytes=flush)
    t_fp32 = benchmark(lambda: x32 @ w32.T, warmup=5, repeat=50, flush_bytes=flush)
    return {"M": m, "N": n, "K": k, "rel_error_vs_reference": error, "rel_error_first_version": error_first,
            "int8_seconds": t_int8.median, "int8_first_version_seconds": t_first.median,
            "fp16_cublas_seconds": t_fp16.median, "fp32_cublas_seconds": t_fp32.median, "l2_flushed": True,
            "int8_weight_bytes": n * k, "fp16_weight_bytes": 2 * n * k, "fp32_weight_bytes": 4 * n * k}


def int8_matmul_figures(xp) -> list[dict]:
    generator = np.random.default_rng(0)
    shapes = [(m, n, k) for (n, k) in ((8192, 8192), (28672, 8192)) for m in (1, 4, 16)]
    return [int8_matmul_row(xp, generator, m, n, k)
            for m, n, k in tqdm(shapes, desc="int8 weight-only matmul")]


def engine_memory_figures(xp) -> list[dict]:
    rows = []
    generator = np.random.default_rng(0)
    configs = [(1024, 8, 1024), (2048, 8, 256), (1024, 16, 4096)]
    for width, n_blocks, batch in tqdm(configs, desc="engine memory"):
        x = xp.asarray(generator.standard_normal((batch, 64), dtype=np.float32))
        labels = xp.asarray(generator.integers(0, 10, batch))

        def run(width=width, n_blocks=n_blocks, x=x, labels=labels):
            model = make_mlp(64, width, n_blocks, 10)
            optimizer = Adam(lr=1e-3)
            for _ in range(2):
                train_mlp_step(model, optimizer, x, labels)
            return model

        _, peak, _ = measure_peak_bytes(run)
        predicted = mlp_step_bytes(64, width, n_blocks, 10, batch).total
        rows.append({"width": width, "n_blocks": n_blocks, "batch": batch,
                     "measured_peak_bytes": peak, "predicted_bytes": predicted})
    return rows


def checkpoint_sweep_figures(n_blocks: int = 16, width: int = 1024, batch: int = 4096) -> dict:
    """Tape peak, block forwards and step time at every segment length, and each step's measured peak."""
    model = make_mlp(64, width, n_blocks, 10)
    x, labels = random_batch(batch, 64, 10)
    sweep = checkpoint_sweep(model, x, labels, warmup=2, repeat=10)
    rows = []
    for k, tape_peak, forwards, seconds in tqdm(zip(sweep.segment_lengths, sweep.peak_activation_bytes,
                                                    sweep.n_block_forwards, sweep.step_seconds, strict=True),
                                                total=n_blocks, desc="checkpoint sweep: measured peaks"):
        _, peak, _ = measure_peak_bytes(lambda k=int(k): forward_backward(model, x, labels, k))
        rows.append({"segment_length": int(k), "peak_tape_bytes": int(tape_peak), "measured_step_peak_bytes": peak,
                     "n_block_forwards": int(forwards), "step_seconds": float(seconds)})
    return {"n_blocks": n_blocks, "width": width, "batch": batch, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the JSON record")
    parser.add_argument("--parts", default="int8,engine,sweep",
                        help="comma-separated parts to (re)measure; others are kept from --out if it exists")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not backend.on_gpu:
        raise SystemExit(f"This script records GPU figures and needs CuPy with a GPU ({backend.describe()}).")
    xp = backend.xp
    device = backend.describe().split(" · ")[1].removeprefix("device: ")
    partial = parts != {"int8", "engine", "sweep"}
    record = json.loads(args.out.read_text()) if partial and args.out.exists() else {}
    record.update({"device": device, "backend": backend.describe(),
                   "date": datetime.date.today().isoformat()})
    if "int8" in parts:
        record["int8_weight_matmul"] = int8_matmul_figures(xp)
    if "engine" in parts:
        record["engine_memory"] = engine_memory_figures(xp)
    if "sweep" in parts:
        record["checkpoint_sweep"] = checkpoint_sweep_figures()
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
