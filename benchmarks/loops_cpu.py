"""CPU loop-transformation benchmark: the best numba matmul against NumPy's BLAS, and every pair.

    python benchmarks/loops_cpu.py --out mlsys_lab/data/loops_cpu.json
    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/loops_cpu.py \
        --out mlsys_lab/data/loops_cpu_1thread.json

Medians of timed runs after warm-up (mlsys_lab.timing.benchmark, perf_counter). Every result is
checked against NumPy first. Writes JSON with the machine, core count and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os

import numba
import numpy as np
from tqdm import tqdm

from mlsys_lab.hardware import cpu_model
from mlsys_lab.loops import matmul, single, wavefront
from mlsys_lab.timing import benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng()
    n = args.n
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    out = np.empty((n, n))
    expected = a @ b
    rows, fastest = {}, {}  # median and minimum seconds: on a shared machine the minimum is least disturbed

    def record(name, fn, check=None, repeat=args.repeat):
        result = fn()
        if check is not None:
            check(result)
        timing = benchmark(fn, warmup=2, repeat=repeat)
        rows[name], fastest[name] = timing.median, timing.min

    def close(result):
        np.testing.assert_allclose(result, expected, atol=1e-8 * n)

    steps = [
        ("blas_matmul", lambda: np.matmul(a, b, out=out), None),
        ("microkernel_8x16", lambda: matmul.matmul_microkernel(a, b, out, 8, 16), close),
        ("microkernel_4x8", lambda: matmul.matmul_microkernel(a, b, out, 4, 8), close),
        ("microkernel_8x16_fastmath", lambda: matmul.matmul_microkernel(a, b, out, 8, 16, slp=False), close),
        ("tiled_64_256_256", lambda: matmul.matmul_tiled(a, b, out, 64, 256, 256), close),
        ("ikj", lambda: matmul.matmul_ikj(a, b, out), close),
    ]
    for name, fn, check in tqdm(steps, desc=f"matmul n={n}"):
        record(name, fn, check)
    small = 512  # the slow orders at a size that finishes
    a2, b2 = a[:small, :small].copy(), b[:small, :small].copy()
    out2, expected2 = np.empty((small, small)), a2 @ b2
    orders = (("ijk_512", matmul.matmul_ijk), ("ikj_512", matmul.matmul_ikj), ("jki_512", matmul.matmul_jki),
              ("ijk_unroll_jam_512", matmul.matmul_ijk_unroll_jam))
    for name, kernel in orders:
        record(name, lambda kernel=kernel: kernel(a2, b2, out2),
               lambda r: np.testing.assert_allclose(r, expected2, atol=1e-8 * small), repeat=3)
    x = rng.standard_normal(1 << 24)
    tmp, y = np.empty_like(x), np.empty_like(x)
    for name, fn in (("sum_naive", lambda: single.sum_naive(x)),
                     ("sum_unrolled", lambda: single.sum_unrolled(x)),
                     ("sum_vectorized", lambda: single.sum_vectorized(x)),
                     ("smooth_branchy", lambda: single.smooth_branchy(x, y)),
                     ("smooth_peeled", lambda: single.smooth_peeled(x, y)),
                     ("affine_relu_unfused", lambda: single.affine_relu_unfused(x, 2.0, 0.5, tmp, y)),
                     ("affine_relu_fused", lambda: single.affine_relu_fused(x, 2.0, 0.5, tmp, y))):
        record(name, fn)
    u = rng.standard_normal((4096, 4096))
    v = np.zeros_like(u)
    record("jacobi_serial", lambda: single.jacobi_serial(u, v))
    record("jacobi_parallel", lambda: single.jacobi_parallel(u, v))
    cost = rng.random((4096, 4096))
    record("min_path_serial", lambda: wavefront.min_path_serial(cost), repeat=3)
    record("min_path_wavefront_256", lambda: wavefront.min_path_wavefront(cost, 256), repeat=3)
    result = {"machine": cpu_model(), "cores": os.cpu_count(), "numba_threads": numba.get_num_threads(),
              "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default (all cores)"),
              "load_average_1min": os.getloadavg()[0], "numpy": np.__version__, "numba": numba.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "matmul_n": n,
              "seconds": rows, "min_seconds": fastest}
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    best = min(rows["microkernel_8x16"], rows["microkernel_4x8"])
    best_min = min(fastest["microkernel_8x16"], fastest["microkernel_4x8"])
    print(f"best numba / BLAS at n={n}: {rows['blas_matmul'] / best:.2f} (medians), "
          f"{fastest['blas_matmul'] / best_min:.2f} (minima); "
          f"ijk/ikj at 512: "
          f"{rows['ijk_512'] / rows['ikj_512']:.1f}x")


if __name__ == "__main__":
    main()
