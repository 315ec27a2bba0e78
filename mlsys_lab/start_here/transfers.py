"""What a tensor costs to move: its bytes, and the time to stream them once over each data path of a machine.

The α-β model of a transfer (latency + bytes / bandwidth, :func:`mlsys_lab.hardware.transfer_seconds`)
with no latency: for the gigabytes of a model's weights the bandwidth term is all that counts.

    tensor_bytes((70_000_000_000,), "bf16")          # 1.4e11: a 70B-parameter model in bf16
    transfer_times(1.4e11, H100_SXM)                 # {'memory (HBM/DRAM)': 0.0418, 'NVLink 4': 0.311, ...}
"""

from __future__ import annotations

import math

from mlsys_lab.hardware import Hardware, links_of, transfer_seconds
from mlsys_lab.units import bytes_per_element
from mlsys_lab.validation import check_finite, check_int, check_sequence, check_type


def tensor_bytes(shape: tuple[int, ...], dtype: str) -> float:
    """Bytes of a dense tensor: (product of the dimensions) x bytes per element of ``dtype``."""
    check_sequence("shape", shape)
    n_elements = math.prod(check_int(f"shape[{i}]", dim, low=1) for i, dim in enumerate(shape))
    return n_elements * bytes_per_element(dtype)


def transfer_times(n_bytes: float, hardware: Hardware) -> dict[str, float]:
    """Seconds to move ``n_bytes`` once over each data path of ``hardware`` (memory first, then links)."""
    check_type("hardware", hardware, Hardware)
    return {link: transfer_seconds(n_bytes, bandwidth) for link, bandwidth in links_of(hardware).items()}


def fits_in_memory(n_bytes: float, hardware: Hardware) -> bool:
    """Whether ``n_bytes`` fit in the device memory of ``hardware`` (nan capacity, i.e. unknown: False)."""
    check_finite("n_bytes", n_bytes, low=0.0)
    return check_type("hardware", hardware, Hardware).memory_bytes >= n_bytes
