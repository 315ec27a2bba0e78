"""A training job that keeps every checkpoint, each made complete by a manifest written last.

The job of :mod:`.checkpoint_io` overwrote one file atomically. Large jobs write many files per
checkpoint (one per rank or shard) and keep several checkpoints, so they cannot rename the whole
checkpoint into place in one step. They write the data first, then a small **manifest** naming it with
its size and SHA-256, atomically, last (PyTorch DCP writes ``.metadata`` after the shards; Orbax marks a
finished step with a commit file). A checkpoint is *complete* when its manifest exists, and *valid* when
the data still matches it. A kill inside :func:`save_checkpoint` leaves data without a manifest; a
write that never reached the disk (no fsync before the manifest) leaves a manifest whose data is short.

Files in ``folder``: ``ckpt_<step>.bin`` (the state, :func:`to_bytes`) and ``ckpt_<step>.json``
(``{"step", "file", "n_bytes", "sha256"}``), with ``<step>`` not zero-padded.
The data loader is a list of mini-batches (row indices into :func:`make_data`'s set), one per step; on a
restart a job gets the same loader again and must skip the batches its checkpoint already trained on.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from mlsys_lab.fault_tolerance.checkpoint_io import ARRAYS, TrainConfig, adam_step, make_data, write_atomic
from mlsys_lab.validation import check_array, check_index_array, check_int, check_sequence, check_type

CONFIG = TrainConfig()
CHECKPOINT_EVERY = 5  # steps between checkpoints (and one after the last step)


def fresh_state(config: TrainConfig = CONFIG) -> dict:
    """Step 0: the initial weights, Adam's m and v at zero (no data order: the loader holds it)."""
    g = np.random.default_rng(check_type("config", config, TrainConfig).seed)
    params = {"w1": g.standard_normal((config.d_in, config.width)) / np.sqrt(config.d_in),
              "b1": np.zeros(config.width),
              "w2": g.standard_normal((config.width, 1)) / np.sqrt(config.width),
              "b2": np.zeros(1)}
    return {"params": params, "m": {k: np.zeros_like(v) for k, v in params.items()},
            "v": {k: np.zeros_like(v) for k, v in params.items()}, "step": 0}


def _check_state(state) -> None:
    """A training state as :func:`fresh_state` makes it: TypeError/ValueError naming ``state``."""
    check_type("state", state, dict)
    for group in ("params", "m", "v"):
        if not isinstance(state.get(group), dict) or any(k not in state[group] for k in ARRAYS):
            raise ValueError(f"state must be what fresh_state returns; its {group!r} is not a dict of {ARRAYS}")
    check_int("state['step']", state.get("step"), low=0)


def train_step(state: dict, x: np.ndarray, y: np.ndarray, batch: np.ndarray, config: TrainConfig = CONFIG) -> float:
    """One Adam step on the rows ``batch`` of (x, y), in place (``state["step"]`` goes up by one)."""
    _check_state(state)
    check_type("config", config, TrainConfig)
    x = check_array("x", x, ndim=2, kinds="f", shape=(None, config.d_in))
    check_array("y", y, ndim=2, kinds="f", shape=(x.shape[0], 1))
    check_index_array("batch", batch, x.shape[0], of_name="the rows of x")
    check_array("batch", batch, ndim=1, kinds="iu")
    return adam_step(state, x[batch], y[batch], config.lr)


def to_bytes(state: dict) -> bytes:
    """The state as bytes: an 8-byte length, a JSON header (step, array names and shapes), then every
    array's float64 bytes in the header's order (``params.w1`` ... ``v.b2``)."""
    _check_state(state)
    names = [(group, k) for group in ("params", "m", "v") for k in ARRAYS]
    header = json.dumps({"step": int(state["step"]),
                         "arrays": [[f"{g}.{k}", list(np.shape(state[g][k]))] for g, k in names]}).encode()
    body = b"".join(np.ascontiguousarray(state[g][k], dtype=np.float64).tobytes() for g, k in names)
    return len(header).to_bytes(8, "little") + header + body


def from_bytes(data: bytes) -> dict:
    """Inverse of :func:`to_bytes`. Bytes that are not such a state may raise any error: check them first."""
    check_type("data", data, (bytes, bytearray))
    if len(data) < 8 or int.from_bytes(data[:8], "little") > len(data) - 8:
        raise ValueError(f"data must be what to_bytes returns (an 8-byte length, a header, the arrays); got "
                         f"{len(data)} bytes")
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    state, offset = {"params": {}, "m": {}, "v": {}, "step": int(header["step"])}, 8 + n
    for name, shape in header["arrays"]:
        group, k = name.split(".")
        size = int(np.prod(shape)) * 8
        state[group][k] = np.frombuffer(data[offset:offset + size], dtype=np.float64).reshape(shape).copy()
        offset += size
    return state


def digest(state: dict) -> str:
    """SHA-256 of :func:`to_bytes`: equal digests, bitwise-equal states."""
    _check_state(state)
    return hashlib.sha256(to_bytes(state)).hexdigest()


def data_name(step: int) -> str:
    """The data file of the checkpoint of ``step``: ``ckpt_<step>.bin``."""
    return f"ckpt_{check_int('step', step, low=0)}.bin"


def manifest_name(step: int) -> str:
    """The manifest of the checkpoint of ``step``: ``ckpt_<step>.json``."""
    return f"ckpt_{check_int('step', step, low=0)}.json"


def save_checkpoint(folder: str | os.PathLike, state: dict) -> None:
    """Write the state of ``state["step"]``: the data (flushed and fsynced), then its manifest, atomically."""
    folder = Path(folder)
    step = check_int("state['step']", state["step"], low=1)
    data = to_bytes(state)
    with open(folder / data_name(step), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    manifest = {"step": step, "file": data_name(step), "n_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}
    write_atomic(folder / manifest_name(step), [json.dumps(manifest).encode()])


def uninterrupted(batches: list[np.ndarray], config: TrainConfig = CONFIG) -> dict[int, str]:
    """{step: :func:`digest`} after every step of the run never killed, in memory: the reference."""
    check_type("config", config, TrainConfig)
    for batch in check_sequence("batches", batches):
        check_array("batches", batch, ndim=1, kinds="iu")
    x, y = make_data(config)
    state, digests = fresh_state(config), {}
    for batch in batches:
        train_step(state, x, y, batch, config)
        digests[state["step"]] = digest(state)
    return digests


def random_batches(n_steps: int, seed: int = 0, config: TrainConfig = CONFIG) -> list[np.ndarray]:
    """A loader: ``n_steps`` mini-batches of ``config.batch`` distinct row indices each (int64)."""
    check_int("n_steps", n_steps, low=1, high=100_000)
    check_type("config", config, TrainConfig)
    g = np.random.default_rng(check_int("seed", seed, low=0))
    return [g.choice(config.n_samples, config.batch, replace=False).astype(np.int64) for _ in range(n_steps)]
