"""Record lesson 07's MPI figures on this machine: the course's ring all-reduce vs MPI.Allreduce.

    python benchmarks/collectives_mpi.py --out mlsys_lab/data/collectives_mpi_cpu.json

For 2 and 4 processes and message sizes from 1 KiB to 64 MiB, runs
:mod:`mlsys_lab.collectives.mpi_ring` under mpiexec, then fits the α-β model (ring coefficients)
to both curves. The notebook quotes the 64 MiB, 4-rank ratio from this file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlsys_lab import mpi  # noqa: E402
from mlsys_lab.collectives import cost, launch  # noqa: E402

SIZES = [2**k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="mlsys_lab/data/collectives_mpi_cpu.json")
    parser.add_argument("--ranks", default="2,4")
    args = parser.parse_args()
    record = {
        "date": datetime.date.today().isoformat(),
        "script": "benchmarks/collectives_mpi.py",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "mpiexec": mpi.mpi_status(),
        "load_average_1min_at_start": os.getloadavg()[0],  # other work slows oversubscribed ranks
        "runs": [],
    }
    for n_procs in tqdm([int(r) for r in args.ranks.split(",")], desc="rank counts"):
        run = launch.ring_benchmark(n_procs, SIZES, repeat=15, budget_s=3.0, timeout_s=600)
        sizes = [row["n_bytes"] for row in run["results"]]
        for label in ("ring", "mpi"):
            alpha, beta = cost.fit_alpha_beta(
                sizes, [row[f"{label}_seconds"] for row in run["results"]], "ring", n_procs
            )
            run[f"{label}_fit"] = {"alpha_seconds": alpha, "beta_seconds_per_byte": beta}
        record["runs"].append(run)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
