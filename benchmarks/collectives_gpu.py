"""Record lesson 07's GPU figures: pinned vs pageable host-to-device copies, and an NCCL run.

Run on a GPU machine from the repository root::

    python benchmarks/collectives_gpu.py --out mlsys_lab/data/collectives_gpu_h200.json

It measures host-to-device copies from pinned and from pageable memory (CUDA events, median of
runs) over a range of sizes, then launches :mod:`mlsys_lab.collectives.nccl_ring` with one process
per visible GPU (with one GPU this only proves that the NCCL communicator starts), and the MPI ring
benchmark on 4 CPU processes (which exercises Open MPI as root where that is the MPI).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlsys_lab import backend, mpi  # noqa: E402
from mlsys_lab.collectives import datapaths, launch  # noqa: E402

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="mlsys_lab/data/collectives_gpu_h200.json")
    args = parser.parse_args()
    if not backend.on_gpu:
        sys.exit(f"this benchmark needs a GPU: {backend.describe()}")
    record = {
        "device": backend.describe().split(" · ")[1].removeprefix("device: "),
        "date": datetime.date.today().isoformat(),
        "backend": backend.describe(),
        "script": "benchmarks/collectives_gpu.py",
        "host_to_device": [],
    }
    for mib in tqdm([1, 4, 16, 64, 256, 1024], desc="H2D copies"):
        row = {"n_bytes": mib * MIB}
        for pinned in (True, False):
            row["pinned_bytes_per_s" if pinned else "pageable_bytes_per_s"] = (
                datapaths.measure_host_to_device(mib * MIB, pinned=pinned, repeat=10)
            )
        record["host_to_device"].append(row)
    record["host_copy_bytes_per_s"] = datapaths.measure_host_copy(256 * MIB)
    n_gpus = backend.xp.cuda.runtime.getDeviceCount()
    try:
        record["nccl"] = launch.nccl_benchmark(n_gpus, [MIB, 64 * MIB], repeat=10, timeout_s=120)
    except (mpi.MpiUnavailable, RuntimeError) as exc:
        record["nccl"] = {"error": str(exc)[-800:]}
    try:
        record["mpi_cpu"] = launch.ring_benchmark(4, [4096, MIB, 64 * MIB], repeat=10, budget_s=2.0)
        record["mpi_cpu"]["mpiexec"] = mpi.mpi_status()
        record["mpi_cpu"]["machine"] = f"{record['device']} host, {os.cpu_count()} CPU cores"
    except (mpi.MpiUnavailable, RuntimeError) as exc:
        record["mpi_cpu"] = {"error": str(exc)[-800:]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    print("written to", os.path.abspath(args.out))


if __name__ == "__main__":
    main()
