"""Kill a training run with SIGKILL at random points, resume it, and compare bit for bit.

The run (:func:`mlsys_lab.fault_tolerance.checkpoint_io.run`) goes to a child process made with ``os.fork``; the
parent kills it (after a delay, once it reports a given step, or from inside a checkpoint write),
restarts it from whatever checkpoint is on disk, and records that checkpoint's step and digest. The
uninterrupted run's digests at the same steps (:func:`~mlsys_lab.fault_tolerance.checkpoint_io.uninterrupted_digests`)
are the reference: equal digests mean a resumed run is bitwise identical. POSIX only (Linux, macOS, WSL).
"""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from mlsys_lab.fault_tolerance.checkpoint_io import TrainConfig, load_checkpoint, run, state_digest, write_atomic
from mlsys_lab.validation import check_int


def _report(fd: int, step: int) -> None:
    os.write(fd, step.to_bytes(4, "little"))


# --- kill and resume -------------------------------------------------------------------------------
def run_killed(folder: str | os.PathLike, total_steps: int, every: int, kill_after_seconds: Iterable[float],
               config: TrainConfig | None = None, writer: Callable = write_atomic,
               pause_between_chunks: float = 0.0) -> list[dict]:
    """Start the run in a child process, SIGKILL it after each delay in turn, restart; finally let it finish.

    Returns one record per attempt: the delay, whether it was killed, and the step and digest of the
    checkpoint on disk afterwards (step None if the file is torn, which the atomic writer never leaves).
    Uses ``os.fork``: POSIX only.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("run_killed needs os.fork (Linux or macOS); on Windows run the lesson under WSL")
    path = Path(folder) / "ckpt.npz"
    log = []
    for delay in [*kill_after_seconds, None]:
        pid = os.fork()
        if pid == 0:  # child: train, then leave without running the parent's cleanup
            code = 0
            try:
                run(folder, total_steps, every, config, writer, pause_between_chunks)
            except BaseException:
                code = 1
            os._exit(code)
        killed, finished, status = False, 0, 0
        if delay is not None:
            time.sleep(delay)
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished == 0:
                os.kill(pid, signal.SIGKILL)
                killed = True
        if finished == 0:
            _, status = os.waitpid(pid, 0)
        if delay is None and status != 0:
            raise RuntimeError(f"the final resume failed (status {status}); is {path} readable?")
        log.append({"kill_after_seconds": delay, "killed": killed, **_inspect(path)})
        if log[-1]["checkpoint_step"] is None:  # torn checkpoint: a resume is impossible
            break
    return log


def run_killed_at_steps(folder: str | os.PathLike, total_steps: int, every: int, kill_steps: Iterable[int],
                        jitter_seconds: float = 0.003, seed: int = 0, config: TrainConfig | None = None,
                        writer: Callable = write_atomic) -> list[dict]:
    """Like :func:`run_killed`, but attempt i is SIGKILLed once the child reports step ``kill_steps[i]``,
    plus a random 0–``jitter_seconds`` delay, so every kill lands at a known stretch of the run and at a
    random point within it (inside a step, a serialization or a write). ``kill_steps`` must increase.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("run_killed_at_steps needs os.fork (Linux or macOS); on Windows use WSL")
    targets = [check_int("kill_steps", int(s), low=1, high=total_steps - 1) for s in kill_steps]
    if any(b <= a for a, b in zip(targets, targets[1:], strict=False)):
        raise ValueError(f"kill_steps must strictly increase; got {targets}")
    jitter = np.random.default_rng(seed).uniform(0.0, jitter_seconds, size=len(targets))
    path = Path(folder) / "ckpt.npz"
    log = []
    for target, extra in [*zip(targets, jitter, strict=True), (None, 0.0)]:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code, pipe = 0, write_end
            try:
                run(folder, total_steps, every, config, writer, on_step=functools.partial(_report, pipe))
            except BaseException:
                code = 1
            os._exit(code)
        os.close(write_end)
        killed = False
        if target is not None:
            buffer = b""
            while True:
                data = os.read(read_end, 4096)
                if not data:  # the child ended before reaching the target
                    break
                buffer += data
                whole = len(buffer) - len(buffer) % 4  # the last complete 4-byte step report
                if whole and int.from_bytes(buffer[whole - 4:whole], "little") >= target:
                    time.sleep(extra)
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
        _, status = os.waitpid(pid, 0)
        os.close(read_end)
        if target is None and status != 0:
            raise RuntimeError(f"the final resume failed (status {status}); is {path} readable?")
        log.append({"kill_at_step": target, "killed": killed, **_inspect(path)})
        if log[-1]["checkpoint_step"] is None:
            break
    return log


def kill_mid_write(folder: str | os.PathLike, total_steps: int, every: int, step: int,
                   config: TrainConfig | None = None, writer: Callable = write_atomic) -> dict:
    """Run in a child process that is SIGKILLed halfway through the write of step ``step``'s checkpoint.

    Returns the step and digest of the checkpoint on disk afterwards (step None: the file is torn).
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("kill_mid_write needs os.fork (Linux or macOS); on Windows use WSL")
    check_int("step", step, low=1)
    pid = os.fork()
    if pid == 0:
        try:
            run(folder, total_steps, every, config, writer, die_mid_write_at_step=step)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return {"killed": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
            **_inspect(Path(folder) / "ckpt.npz")}


def _inspect(path: Path) -> dict:
    """Step and digest of the checkpoint on disk: step 0 if there is none yet, None if it is torn."""
    if not path.exists():
        return {"checkpoint_step": 0, "checkpoint_digest": None}
    try:
        saved = load_checkpoint(path)
    except ValueError:
        return {"checkpoint_step": None, "checkpoint_digest": None}
    return {"checkpoint_step": saved["step"], "checkpoint_digest": state_digest(saved)}

