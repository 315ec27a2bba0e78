"""Record lesson 01's measurements on this machine: fusion, dispatch overhead, attention, allocation.

    python benchmarks/operators_fusion.py            # writes mlsys_lab/data/operators_<gpu|cpu>.json

On the GPU (CuPy backend) it uses large sizes; on a CPU small ones. The notebook shows the GPU file
on machines without a GPU. Every record was checked equal to eager execution before it was timed.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from tqdm.auto import tqdm

from mlsys_lab import backend
from mlsys_lab.hardware import cpu_model
from mlsys_lab.operators import measure

DATA = Path(__file__).resolve().parents[1] / "mlsys_lab" / "data"


def main() -> None:
    gpu = backend.on_gpu
    fusion_sizes = [
        2**p for p in ((12, 14, 16, 18, 20, 22, 24, 26, 28) if gpu else (12, 14, 16, 18, 20, 22, 24))
    ]
    attention_lengths = (512, 1024, 2048, 4096, 8192) if gpu else (128, 256, 512)
    cpu = f"{cpu_model()}, {os.cpu_count()} cores"
    record = {
        "device": backend.describe().split(" · ")[1].removeprefix("device: ") if gpu else cpu,
        "backend": backend.name,
        "date": datetime.date.today().isoformat(),
        "copy_bandwidth_bytes_per_s": measure.copy_bandwidth_bytes_per_s(2**28 if gpu else 2**24),
        "fusion": [measure.measure_fusion(n, repeat=20) for n in tqdm(fusion_sizes, desc="fusion")],
        "fusion_tanh": [
            measure.measure_fusion(n, repeat=10, transcendental=True)
            for n in tqdm(fusion_sizes[-3:], desc="fusion, tanh chain")
        ],
        "dispatch": [measure.measure_dispatch(n_ops, 1024) for n_ops in tqdm((8, 32, 128), desc="dispatch")],
        "attention": [
            measure.measure_attention(s, heads=16 if gpu else 4, repeat=10 if gpu else 3)
            for s in tqdm(attention_lengths, desc="attention")
        ],
        "launch": measure.measure_launch(64, 1024),
        "allocation": [
            measure.measure_allocation(n)
            for n in tqdm((2**20, 2**26, 2**30 if gpu else 2**28), desc="allocation")
        ],
    }
    path = DATA / f"operators_{'gpu' if gpu else 'cpu'}.json"
    path.write_text(json.dumps(record, indent=1))
    best = max(record["fusion"], key=lambda r: r["n_elements"])
    ratio = best["fused_bytes"] / best["fused_seconds"] / record["copy_bandwidth_bytes_per_s"]
    print(
        f"wrote {path}: fused chain at {best['n_elements']:,} elements reaches {ratio:.0%} of copy "
        f"bandwidth; "
        f"eager/fused time {best['eager_seconds'] / best['fused_seconds']:.2f}x"
    )


if __name__ == "__main__":
    main()
