"""The learner's side of a graded run: a confined kernel that answers the grader's calls.

In a graded notebook each check cell is replaced by a *serve* cell::

    from mlsys_lab.course.worker import serve
    serve("roofline", "classify_bound", classify_bound)

When the grader started this kernel (``python -m mlsys_lab.course.worker``, see :func:`main`), the
environment names an inherited socket, ``MLSYS_LAB_GRADING_FD``; :func:`serve` then answers the
grader's requests on it: "call the function with these arguments" (plain data, :mod:`wire`), or, when
an argument stayed on the grader's side (a simulated network), it forwards that object's method calls
back. The cases, the expected values and the verdict live in the grading process only. Without a
grading session (a learner running the notebook, an instructor's plain replay) :func:`serve` runs the
check in this process and prints its verdict, as the course notebooks do.

Confinement, applied by :func:`main` before the kernel starts (so every thread and child inherits it):

- Linux Landlock (unprivileged, as root too): files may be read only under the Python installation,
  ``/usr``, ``/lib*``, ``/etc`` and the ``mlsys_lab`` package *except* ``mlsys_lab/exercises`` (the
  checks' reference implementations); read and written only in the kernel's own folder (its graded
  notebook). The reference notebook, other submissions and the grader's reports are out of reach.
  Signals to processes outside the kernel are refused (Landlock scopes, ABI 6). Where the kernel has no
  Landlock the kernel says so on stderr and runs with the other guards only.
- ``RLIMIT_AS`` (memory, ``MLSYS_LAB_MEMORY_MB``) from the start; ``RLIMIT_CPU`` per exercise, set by
  :func:`start_segment` from ``MLSYS_LAB_CPU_SECONDS`` of CPU time beyond what the kernel already used
  (start-up never counts). No file may be executed (Landlock grants no ``execve`` right).
- An audit hook (:func:`sys.addaudithook`, which cannot be removed), armed by :func:`start_segment`,
  refuses child processes (fork, exec, spawn, subprocess, system), changing resource limits, signals to
  other processes, loading native code through ctypes except numba's JIT (:func:`_native_code_allowed`),
  and importing ``mlsys_lab.exercises``. An audit hook is no sandbox on its own (CPython says so; numba's
  JIT is itself native code); the verdict does not depend on it.

A timed check sends the arguments once (``hold``), has them used ``repeat`` times while the grader reads
this process's CPU clock from outside, then fetches the last result (``last``; see ``cpu_seconds_of`` in
:mod:`mlsys_lab.course.checks`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import socket
import sys
from pathlib import Path
from typing import Any, Callable

from mlsys_lab.course import wire
from mlsys_lab.course.learner_code import learner_line
from mlsys_lab.course.library_answers import LIBRARY_ANSWERS

FD_ENV, CPU_ENV, MEMORY_ENV = "MLSYS_LAB_GRADING_FD", "MLSYS_LAB_CPU_SECONDS", "MLSYS_LAB_MEMORY_MB"
REFUSED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "subprocess.Popen",
    "pty.spawn", "resource.setrlimit", "resource.prlimit", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.dlsym/handle", "ctypes.call_function", "os.setuid", "os.setgid",
})
REFUSED_IMPORTS = ("mlsys_lab.exercises", "mlsys_lab.course.grade", "mlsys_lab.course.nbval_report")
# Packages whose own shared libraries ctypes may open while armed (numba's JIT loads llvmlite's LLVM).
JIT_PACKAGES = ("llvmlite", "numba")
_armed, _jit_folders = [False], []  # armed?; the JIT packages' folders, real paths ending in "/" (set by main)
_session: list[socket.socket] = []


# ---------------------------------------------------------------- the serve cell

def grading() -> bool:
    """Is this kernel answering a grader (a grading session is open)?"""
    return FD_ENV in os.environ


def _channel() -> socket.socket:
    if not _session:
        _session.append(socket.socket(fileno=int(os.environ[FD_ENV])))
    return _session[0]


class _Remote:
    """An object that stayed on the grader's side: attribute reads and calls go back over the socket."""

    def __init__(self, ref: int) -> None:
        object.__setattr__(self, "_ref", ref)

    def __getattr__(self, name: str) -> Any:
        return _request({"op": "getattr", "ref": self._ref, "name": name})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _request({"op": "call", "ref": self._ref, "args": wire.encode(list(args)),
                         "kwargs": wire.encode(kwargs)})

    def __len__(self) -> int:
        return self.__getattr__("__len__")()

    def __getitem__(self, key: Any) -> Any:
        return self.__getattr__("__getitem__")(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.__getattr__("__setitem__")(key, value)

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])


def _request(message: dict) -> Any:
    """Ask the grader about an object that stayed on its side (an attribute, or a call of it)."""
    sock = _channel()
    wire.send_message(sock, message)
    reply = wire.receive_message(sock)
    if reply.get("op") == "raise":
        raise RuntimeError(str(reply.get("message")))
    return wire.decode(reply.get("value"), _Remote)


def serve(lesson: str, exercise: str, fn: Callable) -> None:
    """Answer the grader's calls of ``fn`` until it sends its verdict; without a grader, run the check here."""
    if not grading():
        from mlsys_lab.course.checks import check_function  # only outside a graded run

        check_function(lesson, exercise)(fn)
        return
    sock = _channel()
    wire.send_message(sock, {"op": "ready", "exercise": exercise})
    used: set[str] = set()
    with _watching(LIBRARY_ANSWERS.get(exercise, ()), fn, used):
        _answer(sock, fn, used)


class _watching:
    """While serving, the answering lesson functions record their use (wherever they are bound)."""

    def __init__(self, targets: tuple[str, ...], fn: Callable, used: set[str]) -> None:
        self.swaps: list[tuple[dict, str, Any]] = []
        for target in targets:
            module_name, name = target.split(":")
            module = sys.modules.get(module_name)
            original = getattr(module, name, None)
            if original is None:
                continue

            def spy(*args: Any, _original: Any = original, _target: str = f"{module_name}.{name}", **kwargs: Any):
                used.add(_target)
                return _original(*args, **kwargs)

            spaces = [vars(m) for m in list(sys.modules.values()) if hasattr(m, "__dict__")]
            spaces.append(getattr(fn, "__globals__", {}))
            for space in spaces:
                for key, value in list(space.items()):
                    if value is original:
                        self.swaps.append((space, key, original))
                        space[key] = spy

    def __enter__(self) -> _watching:
        return self

    def __exit__(self, *exc: Any) -> None:
        for space, key, original in self.swaps:
            space[key] = original


def _answer(sock: socket.socket, fn: Callable, used: set[str]) -> None:
    """The serve loop: one reply per request of the grader, until it says it is done."""
    held: dict[str, Any] = {}  # for timing: the arguments sent once ("hold") and the last result
    while True:
        message = wire.receive_message(sock)
        if message.get("op") == "done":
            print(str(message.get("line", "")))  # shown to a human only; the grader keeps the verdict
            return
        try:
            if message.get("op") == "writer":
                chunks = wire.decode(message["chunks"])
                value = _run_writer(fn, Path(str(message["path"])), chunks, message.get("pause_after"))
                wire.send_message(sock, {"op": "result", "value": wire.encode(value)})
                continue
            if message.get("op") in ("hold", "repeat", "last"):
                wire.send_message(sock, _timed_request(message, fn, held, used))
                continue
            args = wire.decode(message["args"], _Remote)
            kwargs = wire.decode(message["kwargs"], _Remote)
            value = fn(*args, **kwargs)
            reply = {"op": "result", "value": wire.encode(value), "used": sorted(used)}
        except (Exception, SystemExit) as exc:  # the learner's function failed: the grader reports it
            reply = _raised(exc, used)
        wire.send_message(sock, reply)


def _raised(exc: BaseException, used: set[str]) -> dict:
    return {"op": "raised", "type": type(exc).__name__, "message": str(exc)[:500], "line": learner_line(exc),
            "used": sorted(used)}


def _timed_request(message: dict, fn: Callable, held: dict[str, Any], used: set[str]) -> dict:
    """``hold``: keep the arguments; ``repeat``: call ``fn`` on them ``repeat`` times, answering no data (the
    grader reads this process's CPU clock around it); ``last``: the last call's result."""
    try:
        if message["op"] == "hold":
            held.update(args=wire.decode(message["args"], _Remote), last=None)
        for _ in range(max(int(message["repeat"]), 1) if message["op"] == "repeat" else 0):
            held["last"] = fn(*held["args"])
        value = wire.encode(held["last"]) if message["op"] == "last" else None
        return {"op": "result", "value": value, "used": sorted(used)}
    except (Exception, SystemExit) as exc:  # as for a call: the grader reports the learner's error
        return _raised(exc, used)


def _run_writer(fn: Callable, path: Path, chunks: list[bytes], pause_after: int | None) -> list[str]:
    """For the crash-safe writer: fork, run ``fn(path, chunks)`` in the child recording fsync/rename, and
    SIGKILL it after ``pause_after`` chunks; return the child's lines. (The grader reads the file.)

    The fork and the kill are this kernel's own: the guards stand down for exactly those two calls.
    """
    import signal

    from mlsys_lab.fault_tolerance.kill_resume import run_writer_killed

    def fork() -> int:
        _armed[0] = False  # this one fork is ours; the child is confined like its parent
        try:
            return os.fork()
        finally:
            _armed[0] = True

    def kill(pid: int) -> None:
        _armed[0] = False
        try:
            os.kill(pid, signal.SIGKILL)
        finally:
            _armed[0] = True

    return run_writer_killed(fn, path, chunks, pause_after, fork=fork, kill=kill)


# ---------------------------------------------------------------- limits per exercise

def _native_code_allowed(event: str, args: tuple) -> bool:
    """Is this ctypes event numba's JIT at work? ``ctypes.dlopen`` of a file inside the llvmlite or numba
    package, ``ctypes.dlsym`` in a library so opened, or of ``_Py_HashSecret`` in the interpreter (numba
    hashes as CPython does). Nothing else: no ``CDLL(None)`` (libc), no look-up by raw handle."""
    if event == "ctypes.dlsym" and len(args) == 2:
        if args[0] is ctypes.pythonapi:
            return args[1] == "_Py_HashSecret"
        args = (getattr(args[0], "_name", None),)
    name = args[0] if event in ("ctypes.dlopen", "ctypes.dlsym") and args else None
    return isinstance(name, (str, bytes)) and os.path.realpath(os.fsdecode(name)).startswith(tuple(_jit_folders))


def _audit(event: str, args: tuple) -> None:
    if not _armed[0]:
        return
    if event in REFUSED_EVENTS and not _native_code_allowed(event, args):
        raise PermissionError(f"{event} is not allowed while grading")
    if event in ("os.kill", "os.killpg", "signal.pthread_kill") and args and args[0] not in (0, os.getpid()):
        raise PermissionError("signals to other processes are not allowed while grading")
    if event == "import" and args and str(args[0]).startswith(REFUSED_IMPORTS):
        raise ImportError(f"{args[0]} is not importable while grading (the checks' reference answers)")


def start_segment() -> None:
    """Called by the grader's first cell of each exercise: arm the guards, start this exercise's CPU budget."""
    if not grading():
        return
    cpu_seconds = float(os.environ.get(CPU_ENV, "0"))
    if cpu_seconds > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        budget = int(usage.ru_utime + usage.ru_stime + cpu_seconds) + 1
        if not _armed[0]:  # once armed, setrlimit is refused to everyone, this function included
            resource.setrlimit(resource.RLIMIT_CPU, (budget, resource.RLIM_INFINITY))
    _armed[0] = True


# ---------------------------------------------------------------- confinement at kernel start

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
FS_READ, FS_ALL = (1 << 2) | (1 << 3), (1 << 16) - 1  # read files and folders; no execve
FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
ABI_FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def readable_paths(workdir: str) -> list[tuple[str, bool]]:
    """(path, writable) pairs the confined kernel may use; everything else is out of reach."""
    import mlsys_lab

    package = os.path.dirname(mlsys_lab.__file__)
    roots = {"/usr", "/lib", "/lib64", "/lib32", "/etc", "/bin", "/sbin", "/opt/conda",
             sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    roots |= {p for p in sys.path if p and os.path.isdir(p) and not os.path.isdir(os.path.join(p, "mlsys_lab"))}
    paths = [(p, False) for p in sorted(roots) if os.path.exists(p)]
    paths += [(os.path.join(package, name), False) for name in sorted(os.listdir(package)) if name != "exercises"]
    paths += [(workdir, True), ("/dev/null", True), ("/dev/urandom", False)]
    return paths


def jit_folders() -> list[str]:
    """The real paths (with a trailing separator) of the installed :data:`JIT_PACKAGES` (found, not imported)."""
    from importlib.util import find_spec

    specs = [find_spec(name) for name in JIT_PACKAGES]
    return [os.path.join(os.path.realpath(folder), "") for spec in specs if spec
            for folder in spec.submodule_search_locations or []]


def landlock_abi() -> int:
    """The Landlock ABI version this Linux kernel offers (0: none, or not Linux)."""
    numbers = _SYSCALLS.get(os.uname().machine)
    if numbers is None or not sys.platform.startswith("linux"):
        return 0
    return max(ctypes.CDLL(None, use_errno=True).syscall(numbers[0], None, 0, 1), 0)


def landlock(workdir: str, extra_files: list[str]) -> str:
    """Confine this process (and its future threads and children) to :func:`readable_paths`; say what happened."""
    numbers = _SYSCALLS.get(os.uname().machine)
    if numbers is None or not sys.platform.startswith("linux"):
        return f"no Landlock on {sys.platform}/{os.uname().machine}: files are not confined"
    create, add_rule, restrict = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    abi = landlock_abi()
    if abi < 1:
        return f"this kernel has no Landlock (errno {ctypes.get_errno()}): files are not confined"
    handled = FS_ALL & ((1 << ABI_FS_BITS.get(abi, 16)) - 1)
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals stay inside the domain
    attr = (ctypes.c_uint64 * 3)(handled, 0, scoped)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 1), 0)
    if ruleset < 0:
        return f"Landlock ruleset refused (errno {ctypes.get_errno()}): files are not confined"
    for path, writable in readable_paths(workdir) + [(f, False) for f in extra_files]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rights = (handled if writable else FS_READ) & handled
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        libc.syscall(add_rule, ruleset, 1, ctypes.byref(rule), 0)
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by landlock_restrict_self
    if libc.syscall(restrict, ruleset, 0) != 0:
        return f"landlock_restrict_self failed (errno {ctypes.get_errno()}): files are not confined"
    os.close(ruleset)
    return f"Landlock ABI {abi}: files confined to the kernel's folder and the Python installation"


def main(argv: list[str]) -> None:
    """Kernel launcher of a graded run: confine, set the memory limit, then start the IPython kernel."""
    import runpy

    workdir = os.getcwd()
    os.environ.update(TMPDIR=workdir, MPLCONFIGDIR=os.path.join(workdir, ".matplotlib"),
                      IPYTHONDIR=os.path.join(workdir, ".ipython"))
    connection = argv[argv.index("-f") + 1] if "-f" in argv else None
    import mlsys_lab.backend  # noqa: F401  (load the array module before the files close)

    print(f"[grading worker] {landlock(workdir, [connection] if connection else [])}", file=sys.stderr)
    memory_mb = int(os.environ.get(MEMORY_ENV, "0"))
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    from mlsys_lab.course import worker  # this file runs as __main__: arm the copy the cells import

    worker._jit_folders[:] = jit_folders()
    sys.addaudithook(worker._audit)
    sys.argv = ["ipykernel_launcher", *argv]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
