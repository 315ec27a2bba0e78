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

Confinement, applied by :func:`main` before the kernel starts (:mod:`mlsys_lab.course.confinement`: Landlock
for files and TCP, seccomp for processes, sockets, signals, limits and what root could use to get out, a network
namespace, a minimal environment) holds whatever the learner's code does, and what held is printed on stderr.
``RLIMIT_DATA`` (memory, ``MLSYS_LAB_MEMORY_MB``: the heap and private writable mappings, where arrays live) is
set from the start (not ``RLIMIT_AS``: CUDA reserves tens of gigabytes of address space it never touches); the
CPU budget of each exercise is counted from outside, by the grader reading this process's CPU clock
(:mod:`mlsys_lab.course.nbval_report`).

Over that, an audit hook (:func:`sys.addaudithook`), armed by :func:`start_segment`, refuses child processes,
changing resource limits, signals to other processes, loading native code through ctypes except numba's JIT
(:func:`_native_code_allowed`), and importing the grader's own modules, with messages a learner can read (the
checks, ``mlsys_lab.exercises``, are stand-ins here: :mod:`mlsys_lab.course.stand_in_checks`). It is
no sandbox (CPython says so, and a cell can reach its flag): the verdict never depends on it.

A timed check sends the arguments once (``hold``), has them used ``repeat`` times while the grader reads
this process's CPU clock from outside, then fetches the last result (``last``; see ``cpu_seconds_of`` in
:mod:`mlsys_lab.course.checks`). A kernel exercise (CUDA C the learner wrote) asks the same with ``device``:
NumPy arguments are copied to the GPU here before the call (once, for ``hold``), a GPU array returned is copied
back, and ``repeat`` with ``sync`` waits for the GPU before it answers, so that the grader's wall clock around the
request times the kernels (``gpu_seconds`` in :mod:`mlsys_lab.course.checks`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import socket
import sys
from typing import Any, Callable

from mlsys_lab import argument_changes
from mlsys_lab.course import confinement, stand_in_checks, wire
from mlsys_lab.course.library_answers import LIBRARY_ANSWERS
from mlsys_lab.tracebacks import learner_line

FD_ENV, MEMORY_ENV = "MLSYS_LAB_GRADING_FD", "MLSYS_LAB_MEMORY_MB"
REFUSED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "subprocess.Popen",
    "pty.spawn", "resource.setrlimit", "resource.prlimit", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.dlsym/handle", "ctypes.call_function", "os.setuid", "os.setgid",
})
# The checks themselves are stand-ins in a worker (course/stand_in_checks.py); the grader is not importable.
REFUSED_IMPORTS = ("mlsys_lab.course.grade", "mlsys_lab.course.nbval_report", "mlsys_lab.course.checks")
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
    """An object that stayed on the grader's side: the operations its exercise defines go back over the socket.

    The grader says which names it offers (``ops``); anything else fails here, with the list.
    """

    def __init__(self, body: Any) -> None:
        if (type(body) is not list or len(body) != 2 or type(body[0]) is not int or type(body[1]) is not list
                or not all(type(name) is str for name in body[1])):
            raise wire.NotPlainData(f"a malformed reference {str(body)[:40]}")
        object.__setattr__(self, "_ref", body[0])
        object.__setattr__(self, "_ops", frozenset(body[1]))

    def _offers(self, name: str) -> None:
        if name not in self._ops:  # a protocol (len, [], iteration) not offered is a TypeError, as in Python
            error = TypeError if name.startswith("__") else AttributeError
            raise error(f"this grader-side object offers {sorted(self._ops)}, not {name!r}")

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._offers(name)
        return _request({"op": "call", "ref": self._ref, "name": name, "args": wire.encode(list(args), _as_ref),
                         "kwargs": wire.encode(kwargs, _as_ref)})

    def __getattr__(self, name: str) -> Any:
        self._offers(name)
        value = _request({"op": "getattr", "ref": self._ref, "name": name})
        if value is _METHOD:
            return lambda *args, **kwargs: self._call(name, *args, **kwargs)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a grader-side object's attributes cannot be set")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("__call__", *args, **kwargs)

    def __len__(self) -> int:
        return self._call("__len__")

    def __getitem__(self, key: Any) -> Any:
        return self._call("__getitem__", key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._call("__setitem__", key, value)

    def __iter__(self):
        if "__iter__" in self._ops:
            return self._call("__iter__")
        return iter([self[i] for i in range(len(self))])

    def __next__(self) -> Any:
        try:
            return self._call("__next__")
        except _GraderRaised as exc:
            if exc.type_name == "StopIteration":
                raise StopIteration from None
            raise

    def __repr__(self) -> str:
        return f"<grader-side object offering {', '.join(sorted(self._ops))}>"


_METHOD = object()  # what a getattr of a method answers: call it with "call"


class _GraderRaised(RuntimeError):
    """Using a grader-side object failed there (a wrong argument, a name it does not offer)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


def _as_ref(obj: Any) -> int:
    """A grader-side object passed back as an argument crosses as its reference; nothing else may."""
    if isinstance(obj, _Remote):
        return object.__getattribute__(obj, "_ref")
    raise wire.NotPlainData(f"a {type(obj).__name__} is not plain data (numbers, strings, bools, None, "
                            "NumPy arrays, and lists/tuples/dicts of these)")


def _request(message: dict) -> Any:
    """Ask the grader about an object that stayed on its side (an attribute, or a call of it)."""
    sock = _channel()
    wire.send_message(sock, message)
    reply = wire.receive_message(sock)
    if reply.get("op") == "raise":
        raise _GraderRaised(str(reply.get("type")), str(reply.get("message")))
    if reply.get("op") == "method":
        return _METHOD
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
            if message.get("op") in ("hold", "repeat", "last"):
                wire.send_message(sock, _timed_request(message, fn, held, used))
                continue
            args = wire.decode(message["args"], _Remote)
            kwargs = wire.decode(message["kwargs"], _Remote)
            device = message.get("device") is True  # a kernel exercise: arrays to the GPU and back
            before = {} if device else argument_changes.snapshot_arrays(fn, args, kwargs)
            value = fn(*_on_device(args, device), **kwargs)
            reply = {"op": "result", "value": wire.encode(_on_host(value)), "used": sorted(used),
                     "changed": argument_changes.changes(before)}  # the grader judges whether that is allowed
        except (Exception, SystemExit) as exc:  # the learner's function failed: the grader reports it
            reply = _raised(exc, used)
        wire.send_message(sock, reply)


def _raised(exc: BaseException, used: set[str]) -> dict:
    return {"op": "raised", "type": type(exc).__name__, "message": str(exc)[:500], "line": learner_line(exc),
            "used": sorted(used)}


def _timed_request(message: dict, fn: Callable, held: dict[str, Any], used: set[str]) -> dict:
    """``hold``: keep the arguments (copied to the GPU once when ``device``); ``repeat``: call ``fn`` on them ``repeat``
    times, then wait for the GPU when ``sync``, answering no data (the grader reads this process's CPU clock, or its
    own wall clock, around it); ``last``: the last call's result (copied back from the GPU)."""
    try:
        if message["op"] == "hold":
            args = wire.decode(message["args"], _Remote)
            held.update(args=_on_device(args, message.get("device") is True), last=None)
        for _ in range(max(int(message["repeat"]), 1) if message["op"] == "repeat" else 0):
            held["last"] = fn(*held["args"])
        if message["op"] == "repeat" and message.get("sync") is True:
            _synchronize()
        value = wire.encode(_on_host(held["last"])) if message["op"] == "last" else None
        return {"op": "result", "value": value, "used": sorted(used)}
    except (Exception, SystemExit) as exc:  # as for a call: the grader reports the learner's error
        return _raised(exc, used)


def _on_device(args: list, device: bool) -> list:
    """For a kernel exercise (``device``): the NumPy arrays among ``args`` copied to the GPU."""
    from mlsys_lab import backend

    return list(backend.to_device(args)) if device else args


def _on_host(value: Any) -> Any:
    """What the learner's function returned, its GPU arrays copied back as NumPy arrays (plain data)."""
    from mlsys_lab import backend

    return backend.to_host(value)


def _synchronize() -> None:
    """Wait for every kernel queued on the GPU (any stream): a timed request ends when the GPU's work does."""
    from mlsys_lab import backend

    if backend.on_gpu:
        backend.xp.cuda.runtime.deviceSynchronize()


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
        raise ImportError(f"{args[0]} is not importable while grading (the grader's own code)")


def start_segment() -> None:
    """Called by the grader's first cell of each exercise: arm the guards; from the first exercise on, no socket
    may be made (the kernel's own are open). The CPU budget is counted from outside (``nbval_report``)."""
    if not grading():
        return
    if not _armed[0]:
        confinement.close_sockets()
    _armed[0] = True


# ---------------------------------------------------------------- the kernel's start

def jit_folders() -> list[str]:
    """The real paths (with a trailing separator) of the installed :data:`JIT_PACKAGES` (found, not imported)."""
    from importlib.util import find_spec

    specs = [find_spec(name) for name in JIT_PACKAGES]
    return [os.path.join(os.path.realpath(folder), "") for spec in specs if spec
            for folder in spec.submodule_search_locations or []]


def _no_subprocess_pipe() -> None:
    """ipykernel listens on a TCP port of 127.0.0.1 for the output of processes the kernel forks; a worker may
    make neither, and ZeroMQ aborts when the socket is refused, so that listener is not set up."""
    from ipykernel.iostream import IOPubThread

    def no_pipe(thread: IOPubThread) -> None:
        thread._pipe_flag = False

    IOPubThread._setup_pipe_in = no_pipe


def main(argv: list[str]) -> None:
    """Kernel launcher of a graded run: confine (:mod:`~mlsys_lab.course.confinement`), set the memory limit,
    then start the IPython kernel. What held is printed on stderr, which the grader keeps."""
    import runpy

    network = confinement.network_namespace()  # before any thread exists (a user namespace needs that)
    workdir = os.getcwd()
    os.environ.update(HOME=workdir, TMPDIR=workdir, MPLCONFIGDIR=os.path.join(workdir, ".matplotlib"),
                      IPYTHONDIR=os.path.join(workdir, ".ipython"),
                      CUPY_CACHE_DIR=os.path.join(workdir, ".cupy", "kernel_cache"))  # compiled kernels: ours only
    connection = argv[argv.index("-f") + 1] if "-f" in argv else None
    import mlsys_lab.backend  # noqa: F401  (load the array module before the files close)

    files = confinement.landlock(workdir, [connection] if connection else [])
    memory_mb = int(os.environ.get(MEMORY_ENV, "0"))
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))
    calls = confinement.seccomp("unix")
    for held, text in (files, calls, network):
        print(f"[grading worker] {'held' if held else 'NOT held'}: {text}", file=sys.stderr, flush=True)
    from mlsys_lab.course import worker  # this file runs as __main__: arm the copy the cells import

    worker._jit_folders[:] = jit_folders()
    _no_subprocess_pipe()
    stand_in_checks.install()
    sys.addaudithook(worker._audit)
    sys.argv = ["ipykernel_launcher", *argv]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
