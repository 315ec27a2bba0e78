"""Run every loop-transformation kernel on the GPU: check against NumPy, time it, write JSON.

    PYTHONPATH=$PWD python3 benchmarks/loops_gpu.py --out mlsys_lab/data/loops_gpu.json

Each kernel runs on fresh random inputs and is compared with its NumPy reference by relative
Frobenius error; times are CUDA-event medians after warm-up (mlsys_lab.timing.benchmark).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels.loops import launchers
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import relative_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=2048, help="matmul size (n x n)")
    parser.add_argument("--grid", type=int, default=8192, help="stencil grid side")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    if not backend.on_gpu:
        raise SystemExit(f"this benchmark needs a GPU: {backend.describe()}")
    xp = backend.xp
    rng = np.random.default_rng()
    n = args.n
    a_host = rng.standard_normal((n, n)).astype(np.float32)
    b_host = rng.standard_normal((n, n)).astype(np.float32)
    reference = launchers.matmul_reference(a_host, b_host)
    a, b = xp.asarray(a_host), xp.asarray(b_host)
    rows = []

    def record(name, idea, fn, ref, flop=None, n_bytes=None):
        err = relative_error(fn(), ref)
        timing = benchmark(fn, warmup=3, repeat=args.repeat)
        row = {"name": name, "idea": idea, "median_s": timing.median, "min_s": timing.min,
               "relative_error": err, "repeat": args.repeat}
        if flop:
            row["flop_per_s"] = flop / timing.median
        if n_bytes:
            row["bytes_per_s"] = n_bytes / timing.median
        rows.append(row)
        print(f"{name:28s} {timing.median * 1e3:9.3f} ms  rel.err {err:.2e}", flush=True)

    flop = 2 * n**3
    record("matmul_cols_inner", "interchanged mapping: threadIdx.x walks rows (strided)",
           lambda: launchers.matmul_naive(a, b, "cols_inner"), reference, flop)
    record("matmul_rows_inner", "threadIdx.x walks columns (coalesced)",
           lambda: launchers.matmul_naive(a, b, "rows_inner"), reference, flop)
    for tile in (16, 32):
        record(f"matmul_tiled_{tile}", f"shared-memory tiling, {tile}x{tile}",
               lambda tile=tile: launchers.matmul_naive(a, b, "tiled", tile), reference, flop)
    base = dict(BM=64, BN=64, BK=16, UNROLL=16, TM=4, TN=4)
    variants = [  # (name, what it adds, parameters)
        ("tunable_tm1_tn1", "no unroll-and-jam: 1 output per thread",
         dict(base, BM=32, BN=32, TM=1, TN=1, VEC=1, PIPE=0)),
        ("tunable_tm4_tn4_vec1_pipe0", "unroll-and-jam: 4x4 outputs per thread", dict(base, VEC=1, PIPE=0)),
        ("tunable_tm4_tn4_vec4_pipe0", "+ float4 loads (vectorization)", dict(base, VEC=4, PIPE=0)),
        ("tunable_tm4_tn4_vec4_pipe1", "+ software pipelining (double buffer)", dict(base, VEC=4, PIPE=1)),
        ("tunable_128x128_tm8_tn8", "bigger tile, 8x8 per thread, float4, pipelined",
         dict(BM=128, BN=128, BK=8, TM=8, TN=8, UNROLL=8, VEC=4, PIPE=1)),
    ]
    for name, idea, params in variants:
        config = launchers.TunableConfig(**params)
        record(name, idea, lambda config=config: launchers.matmul_tunable(a, b, config), reference, flop)
    record("cublas_matmul", "CuPy matmul (cuBLAS), fp32", lambda: xp.matmul(a, b), reference, flop)

    side = args.grid
    u_host = rng.standard_normal((side, side)).astype(np.float32)
    u = xp.asarray(u_host)
    stencil_ref = launchers.jacobi5_reference(u_host)
    stencil_bytes = 2 * u_host.nbytes  # read u once (neighbours hit in cache), write out once
    record("jacobi5_columns_inner", "5-point stencil, threadIdx.x walks columns",
           lambda: launchers.jacobi5(u, True), stencil_ref, n_bytes=stencil_bytes)
    record("jacobi5_rows_inner", "interchanged: threadIdx.x walks rows",
           lambda: launchers.jacobi5(u, False), stencil_ref, n_bytes=stencil_bytes)

    x_host = rng.standard_normal(1 << 26).astype(np.float32)
    x = xp.asarray(x_host)
    fusion_ref = launchers.affine_relu_reference(x_host, 1.5, -0.25)
    record("affine_relu_unfused", "two kernels, y written and read back (4 passes)",
           lambda: launchers.affine_relu(x, 1.5, -0.25, fused=False), fusion_ref, n_bytes=4 * x_host.nbytes)
    record("affine_relu_fused", "one kernel (2 passes)",
           lambda: launchers.affine_relu(x, 1.5, -0.25, fused=True), fusion_ref, n_bytes=2 * x_host.nbytes)

    result = {"device": backend.describe(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "host": platform.node(), "cupy": xp.__version__, "matmul_n": n, "stencil_side": side,
              "fusion_elements": int(x_host.size), "kernels": rows}
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
