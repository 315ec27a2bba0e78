"""Real checkpoints: save everything a run needs, survive SIGKILL, resume bit for bit.

A resumable training state is more than the weights: the optimizer's moments (Adam's m and v), the
step count (Adam's bias correction reads it), the random generator's state and the position in the
data (which epoch, which permutation, which index). Leave one out and the resumed run drifts.

Writes are atomic: the bytes go to a temporary file in the same folder, ``fsync`` puts them on
disk, then ``os.replace`` swaps the name in one step (POSIX rename is atomic) and the folder is
fsynced so the new name survives a power cut. A kill at any moment leaves either the old complete
checkpoint or the new complete one, never a torn file. :func:`write_in_place` is the unsafe way,
kept to show what goes wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from mlsys_lab.validation import check_choice, check_int, check_number, check_positive

CHUNK_BYTES = 1 << 20
ARRAYS = ("w1", "b1", "w2", "b2")


# --- the training run ------------------------------------------------------------------------------
@dataclass
class TrainConfig:
    """A small regression MLP trained with Adam on a fixed synthetic data set (float64)."""

    n_samples: int = 512
    d_in: int = 16
    width: int = 32
    batch: int = 32
    lr: float = 1e-2
    seed: int = 0

    def __post_init__(self) -> None:
        # a small CPU run: sizes bounded so that a typo is refused here, not met as a MemoryError in make_data
        check_int("n_samples", self.n_samples, low=1, high=1_000_000)
        check_int("d_in", self.d_in, low=1, high=4096)
        check_int("width", self.width, low=1, high=4096)
        check_int("batch", self.batch, low=1, high=self.n_samples)
        check_number("lr", self.lr, low=0.0, high=10.0, low_inclusive=False)
        check_int("seed", self.seed, low=0, high=2**32 - 1)


def make_data(config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (n, d_in) and targets (n, 1) from a fixed teacher network."""
    g = np.random.default_rng(1000 + config.seed)
    x = g.standard_normal((config.n_samples, config.d_in))
    y = np.sin(x @ g.standard_normal((config.d_in, 1)))
    return x, y


def init_state(config: TrainConfig) -> dict:
    """Fresh state: weights, Adam moments, step 0, the data-order generator and position."""
    g = np.random.default_rng(config.seed)
    params = {"w1": g.standard_normal((config.d_in, config.width)) / np.sqrt(config.d_in),
              "b1": np.zeros(config.width),
              "w2": g.standard_normal((config.width, 1)) / np.sqrt(config.width),
              "b2": np.zeros(1)}
    order = np.random.default_rng(config.seed + 1)
    state = {"params": params, "m": {k: np.zeros_like(v) for k, v in params.items()},
             "v": {k: np.zeros_like(v) for k, v in params.items()}, "step": 0, "epoch": 0, "position": 0,
             "permutation": order.permutation(config.n_samples), "rng": order.bit_generator.state}
    return state


def resumable_train_step(state: dict, x: np.ndarray, y: np.ndarray, config: TrainConfig) -> float:
    """One Adam step of the resumable run on the next mini-batch, in place; a new permutation at each epoch's end.

    Everything it reads and changes (weights, Adam's m, v and step, the data order and its generator) is in
    ``state``, so a checkpoint of ``state`` is all a resume needs. Returns the mini-batch's mean squared error.
    """
    if state["position"] + config.batch > config.n_samples:
        order = np.random.default_rng()
        order.bit_generator.state = state["rng"]
        state["permutation"] = order.permutation(config.n_samples)
        state["rng"] = order.bit_generator.state
        state["epoch"] += 1
        state["position"] = 0
    idx = state["permutation"][state["position"]:state["position"] + config.batch]
    state["position"] += config.batch
    return adam_step(state, x[idx], y[idx], config.lr)


def adam_step(state: dict, xb: np.ndarray, yb: np.ndarray, lr: float) -> float:
    """One Adam step of the MLP on the mini-batch ``xb`` (B, d_in), ``yb`` (B, 1), in place.

    Changes ``state["params"]``, ``state["m"]``, ``state["v"]`` and ``state["step"]`` (Adam's bias correction
    reads the step). Returns the mini-batch's mean squared error before the step.
    """
    p = state["params"]
    h = np.tanh(xb @ p["w1"] + p["b1"])  # (B, width)
    err = h @ p["w2"] + p["b2"] - yb  # (B, 1)
    dh = (err @ p["w2"].T) * (1 - h * h) * (2 / len(xb))  # (B, width)
    scale = 2 / len(xb)
    grads = {"w2": h.T @ err * scale, "b2": err.sum(0) * scale, "w1": xb.T @ dh, "b1": dh.sum(0)}
    state["step"] += 1
    t = state["step"]
    for k, grad in grads.items():
        state["m"][k] = 0.9 * state["m"][k] + 0.1 * grad
        state["v"][k] = 0.999 * state["v"][k] + 0.001 * grad * grad
        m_hat, v_hat = state["m"][k] / (1 - 0.9 ** t), state["v"][k] / (1 - 0.999 ** t)
        p[k] = p[k] - lr * m_hat / (np.sqrt(v_hat) + 1e-8)
    return float((err ** 2).mean())


# --- serialization and writers ---------------------------------------------------------------------
def state_to_bytes(state: dict) -> bytes:
    """The whole state as an .npz archive (arrays) with a JSON entry for the scalars and the RNG."""
    arrays = {f"{group}.{k}": v for group in ("params", "m", "v") for k, v in state[group].items()}
    arrays["permutation"] = state["permutation"]
    meta = {key: state[key] for key in ("step", "epoch", "position", "rng")}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def state_from_bytes(data: bytes) -> dict:
    """Inverse of :func:`state_to_bytes`; a torn or empty file raises ValueError."""
    try:
        with np.load(io.BytesIO(data)) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as exc:
        raise ValueError(f"checkpoint is corrupt ({len(data)} bytes): {type(exc).__name__}: {exc}") from None
    if "meta" not in arrays:
        raise ValueError(f"checkpoint is corrupt ({len(data)} bytes): no meta entry")
    meta = json.loads(arrays.pop("meta").tobytes())
    state = {"params": {}, "m": {}, "v": {}, "permutation": arrays.pop("permutation"), **meta}
    for key, value in arrays.items():
        group, name = key.split(".")
        state[group][name] = value
    return state


def chunks_of(data: bytes, chunk_bytes: int = CHUNK_BYTES) -> list[bytes]:
    """Split bytes into chunks, as a streaming serializer would hand them over."""
    check_int("chunk_bytes", chunk_bytes, low=1)
    return [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """Crash-safe write: temporary file in the same folder, fsync, atomic rename, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before the name points at them
    os.replace(tmp, path)  # atomic: readers see the old file or the new one
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # make the rename itself durable
    finally:
        os.close(folder)


def write_in_place(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """The unsafe way: truncate the checkpoint and write over it. A kill mid-write tears it."""
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by either writer; ValueError if it is torn."""
    return state_from_bytes(Path(path).read_bytes())


def state_digest(state: dict) -> str:
    """SHA-256 over every array's bytes and the scalars: equal digests mean bitwise-equal states."""
    return hashlib.sha256(state_to_bytes(state)).hexdigest()


def uninterrupted_digests(total_steps: int, config: TrainConfig | None = None) -> dict[int, str]:
    """{step: :func:`state_digest`} after every step of a run that is never killed, in memory (no disk):
    the reference a killed and resumed run must match bit for bit."""
    config = config or TrainConfig()
    total = check_int("total_steps", total_steps, low=1)
    x, y = make_data(config)
    state, digests = init_state(config), {}
    while state["step"] < total:
        resumable_train_step(state, x, y, config)
        digests[state["step"]] = state_digest(state)
    return digests


def run(folder: str | os.PathLike, total_steps: int, every: int, config: TrainConfig | None = None,
        writer: Callable = write_atomic, pause_between_chunks: float = 0.0,
        die_mid_write_at_step: int | None = None, on_step: Callable[[int], None] | None = None) -> dict:
    """Train to ``total_steps``, resuming from ``folder/ckpt.npz`` if it exists; checkpoint every ``every``.

    ``pause_between_chunks`` slows each write (seconds per chunk) so that kills land inside writes;
    ``die_mid_write_at_step`` makes the process SIGKILL itself halfway through that step's write;
    ``on_step(step)`` is called after every optimizer step (progress reports to a supervisor).
    """
    config = config or TrainConfig()
    total = check_int("total_steps", total_steps, low=1)
    every = check_int("every", every, low=1)
    path = Path(folder) / "ckpt.npz"
    x, y = make_data(config)
    state = load_checkpoint(path) if path.exists() else init_state(config)
    while state["step"] < total:
        resumable_train_step(state, x, y, config)
        if on_step is not None:
            on_step(state["step"])
        if state["step"] % every == 0 or state["step"] == total:
            chunks = chunks_of(state_to_bytes(state), 4096)
            if pause_between_chunks:
                chunks = _slow(chunks, pause_between_chunks)
            if state["step"] == die_mid_write_at_step:
                chunks = _die_halfway(chunks)
            writer(path, chunks)
    return state


def _die_halfway(chunks: list[bytes]):
    for index, chunk in enumerate(chunks):
        if index == max(len(chunks) // 2, 1):
            os.kill(os.getpid(), signal.SIGKILL)  # as if the node lost power here
        yield chunk


def _slow(chunks: list[bytes], seconds: float):
    for chunk in chunks:
        yield chunk
        time.sleep(seconds)


# --- asynchronous checkpointing --------------------------------------------------------------------
class AsyncCheckpointer:
    """Snapshot in memory (the only stall), write in a background thread; one write in flight at most."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._thread: threading.Thread | None = None

    def save(self, arrays: dict[str, np.ndarray], copy: bool = True) -> None:
        """Snapshot ``arrays`` and write them in the background. ``copy=False``: they already are a
        snapshot (e.g. a device-to-host copy into a dedicated pinned buffer) that stays untouched
        until the next :meth:`save` or :meth:`wait`."""
        self.wait()  # back-pressure: the previous write must finish first
        snapshot = {k: v.copy() for k, v in arrays.items()} if copy else dict(arrays)
        self._thread = threading.Thread(target=_write_arrays, args=(self.path, snapshot), daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """Whether a background write is still running."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    write_atomic(path, (np.ascontiguousarray(v).data.cast("B") for v in arrays.values()))


def measure_checkpoint_stalls(state_bytes: int, n_checkpoints: int, folder: str | os.PathLike,
                              mode: str, step_seconds_between: float = 0.05) -> np.ndarray:
    """Seconds the training loop stalls per checkpoint of ``state_bytes`` (float32 arrays).

    ``mode``: "blocking" (write + fsync inline) or "async" (:class:`AsyncCheckpointer`). Between
    checkpoints the loop does ``step_seconds_between`` of NumPy work that mutates the state, so a
    background write overlaps with training as it would in a real run.
    """
    check_choice("mode", mode, ("blocking", "async"))
    n_bytes = check_int("state_bytes", state_bytes, low=1024)
    check_positive("step_seconds_between", step_seconds_between)
    g = np.random.default_rng(0)
    arrays = {f"a{i}": g.standard_normal(n_bytes // 16, dtype=np.float32) for i in range(4)}
    path = Path(folder) / f"async_{mode}.bin"
    saver = AsyncCheckpointer(path)
    stalls = []
    for _ in range(check_int("n_checkpoints", n_checkpoints, low=1)):
        end = time.perf_counter() + step_seconds_between
        while time.perf_counter() < end:  # "training": mutate the state
            arrays["a0"] *= np.float32(1.0000001)
        start = time.perf_counter()
        if mode == "blocking":
            _write_arrays(path, arrays)
        else:
            saver.save(arrays)
        stalls.append(time.perf_counter() - start)
    saver.wait()
    return np.array(stalls)
