"""Explorer update latency and package import time (`make bench`).

For every explorer in the course: build it, then move each control to another value and back, timing
each full update (compute, redraw, PNG render); report the median and the worst per explorer against the
50 ms target. Import time is measured in fresh interpreters. Figures depend on the machine: run it where
learners run the course (the CI-sized reference is 2 CPU cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from tqdm.auto import tqdm

TARGET_SECONDS = 0.050


def import_seconds(statement: str, runs: int = 5) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, env={**os.environ, "MLSYS_LAB_BACKEND": "auto"})
        samples.append(time.perf_counter() - start)
    baseline = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - start)
    return statistics.median(samples) - statistics.median(baseline)


def update_latencies(cls, rounds: int = 3) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds of each update (CPU time is what a busy machine does not inflate)."""

    explorer = cls()
    wall, cpu = [], []
    for _ in range(rounds):
        for name, control in explorer.controls.items():
            before = control.value
            for value in (explorer.another_value(name), before):
                start_wall, start_cpu = time.perf_counter(), time.process_time()
                explorer.set(**{name: value})
                wall.append(time.perf_counter() - start_wall)
                cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    print(f"import mlsys_lab + backend: {import_seconds('import mlsys_lab, mlsys_lab.backend') * 1e3:.0f} ms "
          "(interpreter start subtracted; target < 500 ms without CuPy)")
    from mlsys_lab.widgets import discover_explorers

    rows = []
    for cls in tqdm(discover_explorers(), desc="explorers"):
        wall, cpu = update_latencies(cls)
        rows.append((f"{cls.__module__.rsplit('.', 1)[1]}.{cls.__name__}", statistics.median(wall), max(wall),
                     statistics.median(cpu)))
    print(f"{'explorer':48} {'median ms':>10} {'max ms':>8} {'cpu ms':>8}  target {TARGET_SECONDS * 1e3:.0f} ms")
    for name, median, worst, cpu_median in rows:
        flag = "ok" if median <= TARGET_SECONDS else "SLOW"
        print(f"{name:48} {median * 1e3:10.1f} {worst * 1e3:8.1f} {cpu_median * 1e3:8.1f}  {flag}")
    print(f"{sum(r[1] <= TARGET_SECONDS for r in rows)}/{len(rows)} explorers meet the target (wall-clock median)")


if __name__ == "__main__":
    main()
