"""Record 08_parallelism's GPU figures: TP shard GEMM times -> mlsys_lab/data/parallelism_gpu.json.

    MLSYS_LAB_BACKEND=cupy python benchmarks/parallelism_gpu.py [out.json]

(from the repository root, with the package installed, or with PYTHONPATH=. where it is not).

For a GPT-3-width MLP (h = 12288, one 2048-token micro-batch, fp16) it times one rank's GEMMs for
TP degrees 1..64 with CUDA events (median of 20 after warm-up): FLOPs fall as 1/t, time falls less.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

from mlsys_lab import backend
from mlsys_lab.parallelism.tp import time_mlp_shards

HIDDEN, TOKENS, DEGREES = 12288, 2048, (1, 2, 4, 8, 16, 32, 64)


def main(out: str) -> None:
    if not backend.on_gpu:
        sys.exit(f"needs a GPU: {backend.describe()}")
    timings = time_mlp_shards(TOKENS, HIDDEN, DEGREES, dtype="float16", repeat=20)
    seconds = {t: timing.median for t, timing in timings.items()}
    flops = {t: 16 * TOKENS * HIDDEN * HIDDEN / t for t in DEGREES}
    record = {"device": backend.describe().split(" · ")[1].removeprefix("device: "),
              "date": datetime.date.today().isoformat(), "backend": backend.name,
              "what": "one TP rank's MLP GEMMs (n,h)x(h,4h/t) then (n,4h/t)x(4h/t,h), fp16, "
                      "CUDA events, median of 20",
              "hidden": HIDDEN, "n_tokens": TOKENS,
              "tp_degrees": list(DEGREES), "seconds": [seconds[t] for t in DEGREES],
              "tflop_per_s": [flops[t] / seconds[t] / 1e12 for t in DEGREES]}
    Path(out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mlsys_lab/data/parallelism_gpu.json")
