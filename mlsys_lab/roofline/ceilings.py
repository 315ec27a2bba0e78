"""A memory ceiling for this machine that the lesson's kernels cannot beat: the best read-only stream.

A roof must be a real ceiling: if a kernel runs above it, it was not a roof. A copy is a poor memory roof on
a CPU: writing a cache line first reads it (write-allocate), so a copy moves 3 bytes for every 2 it counts,
while ``c = a + b`` moves 4 for every 3 and so "beats" the copy's figure. A read-only stream (the maximum of
an array larger than the caches) writes nothing: every counted byte is a byte moved, and reading is the
fastest thing DRAM does. Its best run over several is this machine's measured bandwidth ceiling.
"""

from __future__ import annotations

from mlsys_lab import backend
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import check_int


def read_bandwidth(mib: int = 256, repeat: int = 10) -> float:
    """Best-of-``repeat`` bandwidth (bytes/s) of reading a ``mib`` MiB float32 array once (its maximum).

    Best rather than median: a ceiling is what the machine *can* do; a busy run only lowers the figure.
    """
    n = check_int("mib", mib, low=1, high=4096) * 2**20 // 4  # up to 4 GiB: far past any cache, larger only waits
    check_int("repeat", repeat, low=1, high=1000)
    xp = backend.xp
    data = xp.ones(n, dtype=xp.float32)
    timing = benchmark(lambda: data.max(), warmup=2, repeat=repeat)
    return 4 * n / timing.min
