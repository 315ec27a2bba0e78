"""Checkpoints as a storage burst (Tectonic-style): how many bytes, how fast, on which tier.

Mixed-precision Adam keeps 16 bytes per parameter in GPU memory (lesson 06): 2 (bf16 weights) +
2 (bf16 gradients) + 4 (fp32 master weights) + 8 (fp32 m and v). A checkpoint needs neither the
gradients (recomputed by the next step) nor, strictly, the bf16 weights (rounded from the master
copy): 12 bytes per parameter suffice, 14 if the bf16 copy is saved too. Sharded (ZeRO/FSDP), every
GPU writes its 1/N share at the same moment: a burst of the whole checkpoint, every interval.

Three ways to absorb it:

* **direct** to the shared store: time = bytes / min(N_nodes · node link, store bandwidth);
* **tiered**: write to each node's local SSD (or host memory), resume training, drain to the
  HDD-backed store in the background; the drain must finish within one checkpoint interval, so the
  store needs only bytes / interval of sustained bandwidth, not the burst peak;
* **aggregation**: many small per-tensor files cost a seek each on HDDs; packing them into large
  objects turns n·seek + bytes/bandwidth into a few seeks plus the transfer.
"""

from __future__ import annotations

import math

from mlsys_lab.validation import check_finite, check_int, check_positive

TRAINING_BYTES_PER_PARAM = {"bf16 weights": 2, "bf16 gradients": 2, "fp32 master weights": 4,
                            "Adam m (fp32)": 4, "Adam v (fp32)": 4}
CHECKPOINT_BYTES_PER_PARAM = {"fp32 master weights": 4, "Adam m (fp32)": 4, "Adam v (fp32)": 4,
                              "bf16 weights (optional)": 2}


def checkpoint_bytes(n_params: float, bytes_per_param: float = 14.0) -> float:
    """Bytes of one full checkpoint: ``n_params`` × bytes per parameter (12 minimal, 14 with bf16 weights)."""
    check_positive("n_params", n_params)
    return float(n_params) * check_positive("bytes_per_param", bytes_per_param)


def checkpoint_bytes_per_gpu(n_params: float, n_gpus: int, bytes_per_param: float = 14.0) -> float:
    """Each GPU's share when the state is fully sharded over ``n_gpus`` (ZeRO-3 / FSDP)."""
    return checkpoint_bytes(n_params, bytes_per_param) / check_int("n_gpus", n_gpus, low=1)


def burst_write_seconds(total_bytes: float, n_nodes: int, node_bytes_per_s: float,
                        store_bytes_per_s: float) -> float:
    """Seconds to write ``total_bytes`` from ``n_nodes`` at once: node links or store, the slower."""
    check_positive("total_bytes", total_bytes)
    n = check_int("n_nodes", n_nodes, low=1)
    bandwidth = min(n * check_positive("node_bytes_per_s", node_bytes_per_s),
                    check_positive("store_bytes_per_s", store_bytes_per_s))
    return total_bytes / bandwidth


def tiered_checkpoint(total_bytes: float, n_nodes: int, local_bytes_per_s: float, store_bytes_per_s: float,
                      interval_seconds: float) -> dict[str, float]:
    """Write to local tier, drain to the store in the background.

    Returns the training stall (local write), the drain time, the store bandwidth the drain needs to
    keep up with the interval, and whether it keeps up.
    """
    check_positive("total_bytes", total_bytes)
    n = check_int("n_nodes", n_nodes, low=1)
    stall = total_bytes / (n * check_positive("local_bytes_per_s", local_bytes_per_s))
    drain = total_bytes / check_positive("store_bytes_per_s", store_bytes_per_s)
    interval = check_positive("interval_seconds", interval_seconds)
    return {"stall_seconds": stall, "drain_seconds": drain, "keeps_up": drain <= interval,
            "store_bytes_per_s_needed": total_bytes / interval}


def hdd_write_seconds(n_writes: int, total_bytes: float, n_disks: int, seek_seconds: float = 0.008,
                      disk_bytes_per_s: float = 200e6) -> float:
    """Seconds for ``n_writes`` separate writes totalling ``total_bytes`` spread over ``n_disks`` HDDs.

    Each write costs a seek (≈ 8 ms: head movement plus half a rotation at 7,200 rpm) before it
    streams at ``disk_bytes_per_s``: (n_writes·seek + bytes/bandwidth) / n_disks.
    """
    k = check_int("n_writes", n_writes, low=1)
    check_finite("total_bytes", total_bytes, low=0.0)
    disks = check_int("n_disks", n_disks, low=1)
    check_finite("seek_seconds", seek_seconds, low=0.0)
    return (k * seek_seconds + total_bytes / check_positive("disk_bytes_per_s", disk_bytes_per_s)) / disks


def aggregated_writes(total_bytes: float, object_bytes: float) -> int:
    """Number of writes once small files are packed into objects of ``object_bytes``."""
    check_positive("total_bytes", total_bytes)
    return max(1, math.ceil(total_bytes / check_positive("object_bytes", object_bytes)))
