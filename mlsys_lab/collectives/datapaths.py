"""Data paths inside one machine: host copies, pinned vs pageable host-to-device copies, link figures.

A copy from *pageable* host memory cannot be handed to the GPU's DMA engine directly: the driver
first copies it into a pinned (page-locked) staging buffer, then DMAs that, so it runs at the slower
of the two. From pinned memory (``cudaHostAlloc``) the DMA engine reads the pages in place, and the
copy can run asynchronously on a stream (NVIDIA, *CUDA C++ Best Practices Guide*, "Pinned Memory").
GPUDirect P2P lets one GPU's DMA read another GPU's memory over NVLink or PCIe; GPUDirect RDMA lets
the network card do the same, with no bounce through host memory.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.hardware import Hardware
from mlsys_lab.timing import benchmark
from mlsys_lab.validation import check_choice, check_int, check_type


def link_ratio(hardware: Hardware, fast: str, slow: str) -> float:
    """How many times faster link ``fast`` is than ``slow`` in a preset (both per direction)."""
    check_type("hardware", hardware, Hardware)
    check_choice("fast", fast, hardware.interconnect_bytes_per_s, among="hardware.interconnect_bytes_per_s")
    check_choice("slow", slow, hardware.interconnect_bytes_per_s, among="hardware.interconnect_bytes_per_s")
    return hardware.interconnect_bytes_per_s[fast] / hardware.interconnect_bytes_per_s[slow]


def measure_host_copy(n_bytes: int = 64 * 2**20, repeat: int = 10) -> float:
    """Bandwidth of an ordinary (load/store) host memory copy, bytes read + written per second."""
    n_bytes = check_int("n_bytes", n_bytes, low=1, high=2**31)  # two buffers of up to 2 GiB
    src = np.ones(n_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    timing = benchmark(
        lambda: np.copyto(dst, src), warmup=2, repeat=check_int("repeat", repeat, low=1, high=1000), use_gpu=False
    )
    return 2 * n_bytes / timing.median


def measure_host_to_device(n_bytes: int = 256 * 2**20, pinned: bool = True, repeat: int = 20) -> float:
    """Host-to-device copy bandwidth (bytes/s) from pinned or pageable host memory; needs the CuPy backend.

    Raises ValueError on NumPy, where there is no device to copy to.
    """
    n_bytes = check_int("n_bytes", n_bytes, low=1)
    if not backend.on_gpu:
        raise ValueError(f"measure_host_to_device needs a GPU; {backend.describe()}")
    xp = backend.xp
    if pinned:
        memory = xp.cuda.alloc_pinned_memory(n_bytes)
        host = np.frombuffer(memory, dtype=np.uint8, count=n_bytes)
    else:
        host = np.empty(n_bytes, dtype=np.uint8)
    host[:] = 1
    device = xp.empty(n_bytes, dtype=xp.uint8)
    timing = benchmark(lambda: device.set(host), warmup=3, repeat=check_int("repeat", repeat, low=1))
    return n_bytes / timing.median
