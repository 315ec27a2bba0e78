"""Static instruction counts of ``matmul_tunable`` configurations (runs on a CPU with the CUDA toolkit).

    python benchmarks/autotune_static_features.py --count 800 \
        --out mlsys_lab/data/autotune_static_features.json

Compiles each configuration with ``nvcc --ptx`` (sm_90) and ``ptxas -v``, counts PTX instructions by
class (mlsys_lab.autotuning.features.count_ptx_instructions) and reads registers and spills; configurations are
taken in the same order as benchmarks/autotune_gpu.py visits them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autotune_gpu import space_in_visit_order  # noqa: E402

from mlsys_lab.autotuning.features import compile_static_features  # noqa: E402
from mlsys_lab.kernels.loader import source_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=700)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    configs = space_in_visit_order()[: args.count]
    path = str(source_path("loops/matmul.cu"))
    with ThreadPoolExecutor(args.workers) as pool:
        features = list(tqdm(pool.map(lambda c: compile_static_features(path, asdict(c)), configs),
                             total=len(configs), desc="compiling", mininterval=10))
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    result = {"toolchain": nvcc[-1], "arch": "sm_90",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "configs": [{"config": asdict(c), "features": f}
                          for c, f in zip(configs, features, strict=True)]}
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
