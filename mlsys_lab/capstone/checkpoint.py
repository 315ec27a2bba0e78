"""The capstone's checkpoint: θ, Adam's m and v and the step, in one file that a crash-safe writer replaces.

Every rank of a data-parallel run holds the same replica, so rank 0 alone writes ``ckpt.bin`` through the writer
piece (lesson 09's ``write_checkpoint(path, chunks)``: a kill at any moment leaves the old complete file or the new
complete one). The bytes start with the SHA-256 of the rest, so a torn file (what an unsafe writer leaves when
the job dies mid-write) is recognised on load instead of resuming from garbage. A resumed run reads the file,
checks that it was written for the same configuration, and continues from its step.

A ZeRO-1 run (:mod:`.zero`) has no replica of m and v: rank r alone holds its slice of them. So every rank writes
its own shard file, ``zero1-step<s>-rank<r>.bin`` (its m and v slices; rank 0's holds θ too, whole on every rank),
with the step in its name and in its metadata, through the same crash-safe writer. A step is trusted only once
all of them are on disk: rank 0 gathers the shards' SHA-256 digests (the gather is the barrier: a rank sends its
digest after its write returned) and then writes ``zero1.json``, the manifest, last. A kill before the manifest
lands leaves the previous manifest naming the previous step, whose shards are still there (a step's shards are
removed only after a later manifest). A resume reads the manifest and checks every shard of its step against
the digests it lists: one missing, torn or from another run is refused, never mixed in.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from mlsys_lab.capstone.train import RunConfig, TrainState
from mlsys_lab.fault_tolerance.checkpoint_io import chunks_of

CHECKPOINT_NAME = "ckpt.bin"
MANIFEST_NAME = "zero1.json"
CHUNK_BYTES = 1 << 16
_SHARD = re.compile(r"zero1-step(\d+)-rank(\d+)\.bin")


class TornCheckpoint(ValueError):
    """The checkpoint on disk is not a complete one: its digest does not match, or it does not parse."""


def run_to_bytes(state: TrainState, config: RunConfig) -> bytes:
    """SHA-256 (32 bytes) of the payload, then the payload: an .npz of θ, m, v, the step and the configuration."""
    return _framed({"theta": state.theta, "m": state.m, "v": state.v}, {"step": state.step,
                                                                         "config": config.to_dict()})


def _framed(arrays: dict, meta: dict) -> bytes:
    """SHA-256 of the payload, then the payload: an .npz of ``arrays`` and ``meta`` (JSON bytes)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8))
    payload = buffer.getvalue()
    return hashlib.sha256(payload).digest() + payload


def _unframed(data: bytes, config: RunConfig, what: str = "the checkpoint") -> tuple[dict, dict]:
    """(arrays, meta) of framed bytes; TornCheckpoint if incomplete, ValueError if for another configuration."""
    digest, payload = data[:32], data[32:]
    if len(data) < 32 or hashlib.sha256(payload).digest() != digest:
        raise TornCheckpoint(f"{what} is torn ({len(data)} bytes whose SHA-256 does not match their header)")
    with np.load(io.BytesIO(payload)) as archive:
        meta = json.loads(archive["meta"].tobytes())
        arrays = {name: archive[name].copy() for name in archive.files if name != "meta"}
    if meta["config"] != json.loads(json.dumps(config.to_dict(), sort_keys=True)):
        raise ValueError(f"{what} was written for another configuration: {meta['config']}")
    return arrays, meta


def run_from_bytes(data: bytes, config: RunConfig) -> TrainState:
    """The state in ``data``; TornCheckpoint if it is incomplete, ValueError if written for another configuration."""
    arrays, meta = _unframed(data, config)
    return TrainState(arrays["theta"], arrays["m"], arrays["v"], int(meta["step"]))


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


# --- ZeRO-1: a shard per rank, a manifest written last ------------------------------------------------
@dataclass
class Zero1Shard:
    """A ZeRO-1 rank's state: θ whole (every rank holds it), this rank's slices of Adam's m and v, the step."""

    theta: np.ndarray
    m: np.ndarray
    v: np.ndarray
    step: int


def shard_path(folder: str | Path, step: int, rank: int) -> Path:
    """Where rank ``rank`` writes its shard of step ``step``."""
    return Path(folder) / f"zero1-step{step:08d}-rank{rank:04d}.bin"


def save_zero1_shard(folder: str | Path, state: Zero1Shard, rank: int, n_ranks: int, config: RunConfig,
                     write_checkpoint: Callable) -> str:
    """Write rank ``rank``'s shard of step ``state.step``: its slices of m and v, and θ too on rank 0 (θ is whole
    on every rank: one copy is enough). Returns the shard's SHA-256 (hex), what the manifest will list."""
    arrays = {"m": state.m, "v": state.v, **({"theta": state.theta} if rank == 0 else {})}
    data = _framed(arrays, {"step": state.step, "rank": rank, "n_ranks": n_ranks, "config": config.to_dict()})
    write_checkpoint(shard_path(folder, state.step, rank), iter(chunks_of(data, CHUNK_BYTES)))
    return data[:32].hex()


def commit_zero1(folder: str | Path, step: int, digests: list[str], config: RunConfig,
                 write_checkpoint: Callable) -> None:
    """Rank 0, after every rank's shard of ``step`` is on disk (``digests``, gathered, rank by rank): write the
    manifest naming the step and the shards' digests, crash-safe, then remove the shards of earlier steps."""
    manifest = {"step": step, "n_ranks": len(digests), "sha256": digests, "config": config.to_dict()}
    data = json.dumps(manifest, sort_keys=True).encode()
    write_checkpoint(Path(folder) / MANIFEST_NAME, iter([hashlib.sha256(data).digest() + data]))
    for path in Path(folder).glob("zero1-step*-rank*.bin"):
        match = _SHARD.fullmatch(path.name)
        if match and int(match.group(1)) < step:
            path.unlink(missing_ok=True)


def zero1_manifest(folder: str | Path) -> dict | None:
    """The manifest of the last complete ZeRO-1 step in ``folder``, or None when none was committed."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        return None
    data = path.read_bytes()
    if len(data) < 32 or hashlib.sha256(data[32:]).digest() != data[:32]:
        raise TornCheckpoint(f"the manifest {path} is torn")
    return json.loads(data[32:])


def load_zero1(folder: str | Path, config: RunConfig, rank: int, n_ranks: int) -> Zero1Shard | None:
    """θ, this rank's slices of m and v, and the step of the last committed ZeRO-1 step; None when none was.

    Every shard of that step is checked, whole, against the manifest's digests (so every rank takes the same
    decision): a missing, torn or foreign shard raises TornCheckpoint; another configuration or rank count,
    ValueError. Nothing falls back silently to an older step: the manifest is the commit, a shard it lists that is
    gone was damaged after the fact.
    """
    manifest = zero1_manifest(folder)
    if manifest is None:
        return None
    if manifest["n_ranks"] != n_ranks:
        raise ValueError(f"the ZeRO-1 checkpoint was written by {manifest['n_ranks']} ranks; resume it on as many, "
                         f"not {n_ranks} (each rank's m and v are its slice)")
    step, shards = int(manifest["step"]), []
    for r, digest in enumerate(manifest["sha256"]):
        path = shard_path(folder, step, r)
        if not path.is_file():
            raise TornCheckpoint(f"the shard of rank {r} of step {step} is missing ({path.name}); refusing to resume")
        data = path.read_bytes()
        if data[:32].hex() != digest:
            raise TornCheckpoint(f"{path.name} does not match the manifest of step {step} (torn or foreign)")
        arrays, meta = _unframed(data, config, path.name)
        if (meta["step"], meta["rank"]) != (step, r):
            raise TornCheckpoint(f"{path.name} holds rank {meta['rank']}'s step {meta['step']}")
        shards.append(arrays)
    return Zero1Shard(shards[0]["theta"], shards[rank]["m"], shards[rank]["v"], step)
