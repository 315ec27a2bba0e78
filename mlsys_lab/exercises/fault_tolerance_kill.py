"""A SIGKILL the check sees from its own side: a data stream that stops, and the folder as it was at that moment.

A process killed with SIGKILL while it waits for its next piece of data leaves behind exactly what its finished
system calls did: every completed ``write()`` is in the kernel's page cache (it survives the kill; only a power
cut loses it), nothing that still sat in Python's buffers. :class:`KillingStream` is that wait. The check hands
it to the learner's code as its data (a writer's chunks, a training loop's batches); when the code asks for the
item the check chose to kill before (drawn from the check's hidden randomness), the stream records the folder
(:func:`snapshot`: names, inode numbers, contents) and raises :class:`SimulatedKill` instead of handing it over.
The verdict is judged from that record and from what the check's process observes itself (inode numbers, the
folder's events: :class:`FolderEvents`), never from what the learner's code reports, and never from what it
does after the kill point: a resume starts from the record, restored into a fresh folder (:func:`restore_folder`).

The same code runs in a learner's notebook (the stream is an object of their process) and in a graded run: the
stream stays in the grader, and the learner's worker calls its ``__next__`` by reference
(:data:`KillingStream.LEARNER_OPERATIONS`); there the kill reaches the learner's code as the worker's error for a
failed grader-side call, which their code might catch, and which changes nothing: the record is already taken.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

MAX_FILE_BYTES = 16 << 20  # a snapshot keeps a file's content up to this size (the checkpoints here: < 1 MB)
MAX_SNAPSHOT_BYTES = 128 << 20  # and the contents of all its files up to this (what a learner's folder makes us hold)
MAX_ENTRIES = 1_000  # files and folders a snapshot records, in all
MAX_DEPTH = 4  # folders within the snapshot's folder it descends into


class SimulatedKill(BaseException):
    """Raised by :class:`KillingStream` at its kill point: the process is dead from here on.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that an ``except Exception`` in the code that waits for
    data does not swallow it. Nothing that code does afterwards counts: the check judges the snapshot.
    """


class KillingStream:
    """The items of ``items`` one at a time; before item ``kill_before`` (0-based; ``len(items)``: the request
    after the last, before the consumer learns the data ended; None: never) it calls ``observe()``, keeps the
    result as :attr:`observed`, and raises :class:`SimulatedKill`, then again on every later request."""

    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"__iter__", "__next__"})

    def __init__(self, items: Sequence, kill_before: int | None, observe: Callable[[], Any]) -> None:
        self._items, self._kill_before, self._observe = list(items), kill_before, observe
        self._served = 0
        self.killed = False  # the kill point was reached
        self.finished = False  # the consumer asked past the last item (and was not killed there)
        self.observed: Any = None  # what observe() returned at the kill point

    def __iter__(self) -> KillingStream:
        return self

    def __next__(self) -> Any:
        if self.killed:
            raise SimulatedKill("the process was killed: it asks for no more data")
        if self._served == self._kill_before:
            self.observed = self._observe()
            self.killed = True
            raise SimulatedKill(f"SIGKILL, simulated by the check, while waiting for item {self._served + 1}: "
                                "the check judges the folder as it was at this moment")
        if self._served >= len(self._items):
            self.finished = True
            raise StopIteration
        self._served += 1
        return self._items[self._served - 1]


def run_until_killed(fn: Callable, args: tuple, stream: KillingStream) -> None:
    """Call ``fn(*args)``; once ``stream`` has killed it, whatever it raises (the kill itself, or, in a graded run,
    the worker's error that carries it, perhaps caught and replaced by the learner's code) is the kill's echo and
    is dropped. Before the kill point an error is the learner's own, and propagates (the check reports it)."""
    try:
        fn(*args)
    except SimulatedKill:
        if not stream.killed:  # not ours: a learner's code raising the check's own exception class
            raise
    except Exception:
        if not stream.killed:
            raise


# ------------------------------------------------------------------------------ what the folder holds
# The learner's process can rename, replace and link anything in its folder, even while the check looks (a thread
# it left running). So the check never goes through a name it did not just make itself: it holds a descriptor of
# each folder, and reads and writes relative to it with O_NOFOLLOW, so a symbolic link planted where a folder or
# file was expected is recorded as one, never followed (it could name a file only the grader may read or write).
_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC if os.name == "posix" else 0


@dataclass(frozen=True)
class Entry:
    """One name in a snapshot: a folder, a regular file with its content, or something else (never followed)."""

    kind: str  # "dir", "file" or "other" (a symbolic link, a pipe, a file over the size limits)
    inode: int
    content: bytes | None = None  # a regular file's bytes


def open_folder(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """A descriptor of the folder ``path`` (relative to ``dir_fd``), never reached through a symbolic link."""
    return os.open(path, _FOLDER, dir_fd=dir_fd)


def make_folder(parent_fd: int, name: str) -> int:
    """A new, empty folder ``name`` in the folder ``parent_fd``, and a descriptor of it."""
    os.mkdir(name, 0o755, dir_fd=parent_fd)
    return open_folder(name, dir_fd=parent_fd)


def write_new_file(folder_fd: int, name: str, content: bytes) -> int:
    """Create ``name`` (it must not exist) in the folder ``folder_fd`` holding ``content``; its inode number."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE, 0o644, dir_fd=folder_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
        return os.fstat(f.fileno()).st_ino


def snapshot(folder: int | str | os.PathLike) -> dict[str, Entry]:
    """{path relative to ``folder`` (a path, or a descriptor from :func:`open_folder`): :class:`Entry`}."""
    out: dict[str, Entry] = {}
    held = [0]  # bytes of content kept so far

    def walk(fd: int, prefix: str, depth: int) -> None:
        try:
            items = sorted(os.scandir(fd), key=lambda e: e.name)
        except OSError:
            return
        for item in items:
            if len(out) >= MAX_ENTRIES:
                return
            try:
                name, info = prefix + item.name, item.stat(follow_symlinks=False)
            except OSError:  # gone since it was listed (a thread of the learner's still at work)
                continue
            if stat.S_ISDIR(info.st_mode):
                out[name] = Entry("dir", info.st_ino)
                if depth < MAX_DEPTH:
                    with contextlib.suppress(OSError):
                        inner = open_folder(item.name, dir_fd=fd)
                        try:
                            walk(inner, name + "/", depth + 1)
                        finally:
                            os.close(inner)
            elif stat.S_ISREG(info.st_mode) and info.st_size <= min(MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES - held[0]):
                out[name] = _read_regular(fd, item.name, info, min(MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES - held[0]))
                held[0] += len(out[name].content or b"")
            else:
                out[name] = Entry("other", info.st_ino)

    top = folder if isinstance(folder, int) else open_folder(folder)
    try:
        walk(top, "", 0)
    finally:
        if top is not folder:
            os.close(top)
    return out


def _read_regular(folder_fd: int, name: str, info: os.stat_result, limit: int) -> Entry:
    try:
        fd = os.open(name, os.O_RDONLY | _FILE, dir_fd=folder_fd)
    except OSError:
        return Entry("other", info.st_ino)
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode):  # replaced by something else since it was listed
            return Entry("other", now.st_ino)
        content = f.read(limit + 1)  # it may have grown since it was listed
    return Entry("file", now.st_ino, content) if len(content) <= limit else Entry("other", now.st_ino)


def restore_folder(files: dict[str, Entry], folder_fd: int) -> None:
    """Make the empty folder ``folder_fd`` hold the snapshot's folders and regular files (what a restart finds)."""
    opened = {"": folder_fd}
    try:
        for name, entry in sorted(files.items()):
            parent, _, base = name.rpartition("/")
            if parent not in opened:  # a folder the snapshot did not descend into, or one it lost: skip its files
                continue
            if entry.kind == "dir":
                opened[name] = make_folder(opened[parent], base)
            elif entry.kind == "file":
                write_new_file(opened[parent], base, entry.content or b"")
    finally:
        for name, fd in opened.items():
            if name:
                os.close(fd)


def files_of(files: dict[str, Entry]) -> dict[str, bytes]:
    """{name: content} of the snapshot's regular files."""
    return {name: entry.content for name, entry in files.items() if entry.kind == "file" and entry.content is not None}


# ------------------------------------------------------------------------------ what happens to the names
INOTIFY_EVENTS = {0x2: "modify", 0x40: "moved_from", 0x80: "moved_to", 0x100: "create", 0x200: "delete",
                  0x4000: "overflow"}
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000  # watch a folder, never what a symbolic link names


class FolderEvents:
    """The changes to the names in one folder, in order, as the kernel reports them to this process (Linux
    inotify): ``(event, name, cookie)`` with event one of "modify", "create", "delete", "moved_from", "moved_to"
    (a rename within the folder gives both, with one cookie) or "overflow" (events were lost). Elsewhere, or when
    the kernel refuses, :attr:`available` is False and no event is ever reported."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self._fd = -1
        if not sys.platform.startswith("linux"):
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        if fd < 0:
            return
        mask = sum(bit for bit, word in INOTIFY_EVENTS.items() if word != "overflow") | IN_ONLYDIR | IN_DONT_FOLLOW
        if libc.inotify_add_watch(fd, os.fsencode(os.fspath(folder)), mask) < 0:
            os.close(fd)
            return
        self._fd = fd

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def read(self) -> list[tuple[str, str, int]]:
        """The events since the last read (the kernel queued each as the system call that caused it ran)."""
        data = b""
        while self._fd >= 0:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        events, offset = [], 0
        while offset + 16 <= len(data):
            _, mask, cookie, length = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16:offset + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
            offset += 16 + length
            events += [(word, name, cookie) for bit, word in INOTIFY_EVENTS.items() if mask & bit]
        return events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FolderEvents:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def name_changes(events: list[tuple[str, str, int]], name: str) -> str | None:
    """What, if anything, changed ``name`` other than one rename onto it from within the folder: the moments a
    SIGKILL would have left it torn or missing (None when there were none)."""
    moved_from = {cookie for event, _, cookie in events if event == "moved_from"}
    for event, event_name, cookie in events:
        if event_name != name:
            continue
        if event == "moved_to" and cookie not in moved_from:
            return ("a file from another folder was renamed onto it: keep the temporary file in the checkpoint's own "
                    "folder (a rename between file systems fails, and one between folders is not covered by the "
                    "folder's fsync)")
        what = {"modify": "it was written to in place (opened for writing or truncated)",
                "create": "it was created afresh, so for a moment it did not exist",
                "delete": "it was deleted before the new one took its name",
                "moved_from": "it was renamed away before the new one took its name"}.get(event)
        if what:
            return what
    return None
