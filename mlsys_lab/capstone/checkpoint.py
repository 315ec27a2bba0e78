"""The capstone's checkpoint: θ, Adam's m and v and the step, in one file that a crash-safe writer replaces.

Every rank of a data-parallel run holds the same replica, so rank 0 alone writes ``ckpt.bin`` through the writer
piece (lesson 09's ``write_checkpoint(path, chunks)``: a kill at any moment leaves the old complete file or the new
complete one). The bytes start with the SHA-256 of the rest, so a torn file (what an unsafe writer leaves when
the job dies mid-write) is recognised on load instead of resuming from garbage. A resumed run reads the file,
checks that it was written for the same configuration, and continues from its step.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Callable

import numpy as np

from mlsys_lab.capstone.train import RunConfig, TrainState
from mlsys_lab.fault_tolerance.checkpoint_io import chunks_of

CHECKPOINT_NAME = "ckpt.bin"
CHUNK_BYTES = 1 << 16


class TornCheckpoint(ValueError):
    """The checkpoint on disk is not a complete one: its digest does not match, or it does not parse."""


def run_to_bytes(state: TrainState, config: RunConfig) -> bytes:
    """SHA-256 (32 bytes) of the payload, then the payload: an .npz of θ, m, v, the step and the configuration."""
    buffer = io.BytesIO()
    meta = json.dumps({"step": state.step, "config": config.to_dict()}, sort_keys=True).encode()
    np.savez(buffer, theta=state.theta, m=state.m, v=state.v, meta=np.frombuffer(meta, dtype=np.uint8))
    payload = buffer.getvalue()
    return hashlib.sha256(payload).digest() + payload


def run_from_bytes(data: bytes, config: RunConfig) -> TrainState:
    """The state in ``data``; TornCheckpoint if it is incomplete, ValueError if written for another configuration."""
    digest, payload = data[:32], data[32:]
    if len(data) < 32 or hashlib.sha256(payload).digest() != digest:
        raise TornCheckpoint(f"the checkpoint is torn ({len(data)} bytes whose SHA-256 does not match their header)")
    with np.load(io.BytesIO(payload)) as archive:
        meta = json.loads(archive["meta"].tobytes())
        theta, m, v = archive["theta"], archive["m"], archive["v"]
    if meta["config"] != json.loads(json.dumps(config.to_dict(), sort_keys=True)):
        raise ValueError(f"the checkpoint was written for another configuration: {meta['config']}")
    return TrainState(theta.copy(), m.copy(), v.copy(), int(meta["step"]))


def save_run(folder: str | Path, state: TrainState, config: RunConfig, write_checkpoint: Callable) -> int:
    """Write ``state`` to ``folder/ckpt.bin`` with ``write_checkpoint(path, chunks)``; returns the bytes written."""
    data = run_to_bytes(state, config)
    write_checkpoint(Path(folder) / CHECKPOINT_NAME, iter(chunks_of(data, CHUNK_BYTES)))
    return len(data)


def load_run(folder: str | Path, config: RunConfig) -> TrainState | None:
    """The state in ``folder/ckpt.bin``, or None when there is none yet (stray temporary files are ignored)."""
    path = Path(folder) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    return run_from_bytes(path.read_bytes(), config)
