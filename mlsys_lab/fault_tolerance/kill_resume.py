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
import select
import signal
import stat
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




# --- a writer killed mid-write, with its fsync and rename calls on record ------------------------------
def _record_calls(say: Callable[[str], None]) -> None:
    """In a child process: wrap os.fsync, os.replace and os.rename so that each call is reported first.

    ``fsync file <inode> <size>`` (the size the file had when it was flushed to disk) or ``fsync dir <inode>``;
    ``rename <inode of src> <folder of src>|<dst>``.
    """
    real = {name: getattr(os, name) for name in ("fsync", "replace", "rename")}

    def fsync(fd):
        info = os.fstat(fd)
        say(f"fsync dir {info.st_ino}" if stat.S_ISDIR(info.st_mode) else f"fsync file {info.st_ino} {info.st_size}")
        return real["fsync"](fd)

    def renamer(name: str) -> Callable:
        def call(src, dst, *args, **kwargs):
            try:
                inode = os.stat(src).st_ino
            except OSError:
                inode = -1
            folder = os.path.dirname(os.path.realpath(os.fspath(src)))
            say(f"rename {inode} {folder}|{os.path.realpath(os.fspath(dst))}")
            return real[name](src, dst, *args, **kwargs)
        return call

    os.fsync, os.replace, os.rename = fsync, renamer("replace"), renamer("rename")


def run_writer_killed(writer: Callable, path: str | os.PathLike, chunks: list[bytes], pause_after: int | None,
                      fork: Callable[[], int] = os.fork, kill: Callable[[int], None] | None = None,
                      timeout_seconds: float = 20.0) -> list[str]:
    """Run ``writer(path, chunk_stream)`` in a forked child and SIGKILL it after ``pause_after`` chunks.

    The stream stops before chunk ``pause_after`` (``len(chunks)``: after the last one, before the writer
    can finish) and the child is killed there; ``None`` lets the writer finish. Returns the lines the child
    reported, in order: its fsync and rename calls (:func:`_record_calls`), then ``paused``, ``done``,
    ``todo`` (it raised NotImplementedError), ``raised <error>``, or ``timed out``. The caller inspects the
    file. ``fork`` and ``kill`` may be replaced by a caller that guards its own forks (a confined kernel).
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("run_writer_killed needs os.fork (Linux or macOS); on Windows use WSL")
    kill = kill or (lambda pid: os.kill(pid, signal.SIGKILL))
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # the child: report on the pipe, never return into the caller's code
        os.close(read_end)

        def say(text: str) -> None:
            os.write(write_end, (text + "\n").encode())

        def stream():
            for index, chunk in enumerate(chunks):
                if index == pause_after:
                    say("paused")
                    time.sleep(60)
                yield chunk
            if pause_after == len(chunks):
                say("paused")
                time.sleep(60)

        _record_calls(say)
        try:
            writer(path, stream())
            say("done")
        except NotImplementedError:
            say("todo")
        except BaseException as exc:  # report, never raise in a forked child
            say(f"raised {type(exc).__name__}: {exc}".replace("\n", " "))
        os._exit(0)
    os.close(write_end)
    lines, buffer, deadline = [], b"", time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if not select.select([read_end], [], [], 0.5)[0]:
            continue
        data = os.read(read_end, 4096)
        if not data:
            break
        *complete, buffer = (buffer + data).split(b"\n")
        lines += [line.decode(errors="replace") for line in complete]
        if "paused" in lines:
            break
    else:
        lines.append("timed out")
    kill(pid)  # harmless if it already ended: it stays a zombie until waitpid
    os.waitpid(pid, 0)
    os.close(read_end)
    return lines
