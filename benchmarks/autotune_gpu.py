"""Measure the ``matmul_tunable`` configuration space on the GPU, as much of it as fits in a time budget.

    PYTHONPATH=$PWD python3 benchmarks/autotune_gpu.py --out mlsys_lab/data/autotune_gpu.json --budget-s 150

Configurations are visited in a fixed random order (seed 0) over ``kernels.loops.tunable_space()`` so
that what is measured within the budget is an unbiased sample of the whole space. For each: compile
(NVRTC through CuPy), check against a float64 reference by relative error, time with CUDA events
(median after warm-up), and read the compiled kernel's registers and local (spill) memory.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from dataclasses import asdict

import numpy as np
from tqdm import tqdm

from mlsys_lab import backend
from mlsys_lab.kernels.loops import launchers
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import relative_error


def space_in_visit_order(seed: int = 0) -> list[launchers.TunableConfig]:
    """The tunable space, shuffled by ``seed`` (the order the benchmark and the static features share)."""
    space = launchers.tunable_space()
    return [space[i] for i in np.random.default_rng(seed).permutation(len(space))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    if not backend.on_gpu:
        raise SystemExit(f"this benchmark needs a GPU: {backend.describe()}")
    xp = backend.xp
    rng = np.random.default_rng()
    n = args.n
    a = xp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    b = xp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    reference = xp.matmul(a.astype(xp.float64), b.astype(xp.float64))
    cublas = benchmark(lambda: xp.matmul(a, b), warmup=5, repeat=50)
    cublas_err = relative_error(xp.matmul(a, b), reference)
    rows, started = [], time.perf_counter()
    for config in tqdm(space_in_visit_order(), desc="configs", mininterval=10):
        if time.perf_counter() - started > args.budget_s:
            break
        t0 = time.perf_counter()
        try:
            fn = launchers.tunable_function(config)
            compile_s = time.perf_counter() - t0
            err = relative_error(launchers.matmul_tunable(a, b, config), reference)
            timing = benchmark(lambda config=config: launchers.matmul_tunable(a, b, config), warmup=2,
                               repeat=args.repeat)
        except Exception as exc:  # record and go on: a config that fails to compile or launch is data too
            rows.append({"config": asdict(config), "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        rows.append({"config": asdict(config), "median_s": timing.median, "min_s": timing.min,
                     "relative_error": err, "compile_s": compile_s,
                     "registers": int(getattr(fn, "num_regs", -1)),
                     "local_bytes": int(getattr(fn, "local_size_bytes", -1))})
    result = {"device": backend.describe(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "cupy": xp.__version__, "n": n, "flop": 2 * n**3, "space_size": len(launchers.tunable_space()),
              "budget_s": args.budget_s, "cublas_median_s": cublas.median,
              "cublas_relative_error": cublas_err,
              "measured": rows}
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    ok = [r for r in rows if "median_s" in r]
    best = min(ok, key=lambda r: r["median_s"])
    print(f"measured {len(ok)} of {len(launchers.tunable_space())} configs ({len(rows) - len(ok)} failed); "
          f"best {best['median_s'] * 1e3:.3f} ms {best['config']}; cuBLAS {cublas.median * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
