"""The grader's side of a graded run: the checks run here, the learner's function is called over a socket.

:func:`run_check` drives one exercise: it waits for the worker's serve cell, then runs the lesson's own
``check_<name>`` (from :mod:`mlsys_lab.exercises`, unchanged) with a :class:`LearnerFunction` in place of the
learner's function. The proxy sends each call's arguments as plain data (:mod:`mlsys_lab.course.wire`)
and decodes the answer as plain data; objects the check passes in (a simulated ``Network``, a measuring
function) stay here and the worker reaches them only through :meth:`LearnerFunction.serve_request`, and
only for what the exercise defines: the names the object's class lists in ``LEARNER_OPERATIONS`` (a
``frozenset`` of attribute and method names; dunders from :data:`DUNDER_OPERATIONS` only when listed), or a
call of a plain function the check handed in. A result that is not plain data crosses only when it is such
an object too: an array of bytes, a file object or a bound method of anything else never becomes reachable
(an ``ndarray`` reached by reference would offer ``tofile``, a way to write any file the grader can).
The verdict is the ``Verdict`` object the check computed in this process
(:data:`mlsys_lab.exercises.VERDICT_SINK`), never text the worker printed.
A check that times the learner's function asks :meth:`LearnerFunction.cpu_seconds_of`, which reads the
worker's CPU clock from here (:func:`process_cpu_seconds`, by the pid nbval started), not a number the
worker reports; a kernel exercise asks :meth:`LearnerFunction.gpu_seconds`, this process's wall clock around a
request that ends when the worker's GPU is idle. After a sticky CUDA error in the worker (an illegal address: its
GPU context is lost) the check's failing line is the exercise's message and a fresh worker serves the next one.
"""

from __future__ import annotations

import functools
import inspect
import socket
import sys
import time
import types
from types import ModuleType
from typing import Any, Callable

from mlsys_lab import backend
from mlsys_lab.course import wire

# What a learner's code may do with a grader-side object, beyond what its class names in LEARNER_OPERATIONS:
# nothing. These dunders are the ones a class may name; each maps to the operation it stands for.
DUNDER_OPERATIONS = {
    "__call__": lambda target, *args, **kwargs: target(*args, **kwargs),
    "__len__": lambda target: len(target),
    "__getitem__": lambda target, key: target[key],
    "__setitem__": lambda target, key, value: target.__setitem__(key, value),
    "__iter__": lambda target: iter(target),
    "__next__": lambda target: next(target),
}
MAX_RECEIVED_BYTES = 512 * 1024 * 1024  # what one exercise's worker may send the grader in all


def lessons() -> dict[str, ModuleType]:
    """The check modules by lesson slug (imported on first use: they import every lesson package)."""
    from mlsys_lab.exercises import (
        autotuning,
        capstone,
        collectives,
        fault_tolerance,
        loops,
        memory_hierarchy,
        moe,
        operators,
        parallelism,
        peft,
        roofline,
        start_here,
        training_memory,
    )

    modules = (autotuning, collectives, fault_tolerance, loops, memory_hierarchy, moe, operators, parallelism,
               peft, roofline, start_here, training_memory, capstone)
    return {m.__name__.rsplit(".", 1)[1]: m for m in modules}


def check_function(lesson: str, exercise: str) -> Callable[[Callable], None]:
    """``check_<exercise>`` of ``mlsys_lab.exercises.<lesson>``."""
    module = lessons().get(lesson)
    if module is None or not hasattr(module, f"check_{exercise}"):
        raise ValueError(f"no check_{exercise} in mlsys_lab.exercises.{lesson}")
    return getattr(module, f"check_{exercise}")


class WorkerGone(RuntimeError):
    """The worker stopped answering (it crashed, hung, hit a limit, or broke the protocol)."""


def _learner_error(type_name: str, message: str, line: str = "") -> Exception:
    """The learner's exception, rebuilt here by name only (no code of theirs runs in this process), with
    the line of their code that raised it as the worker saw it (plain text: ``learner_line``)."""
    if type_name == "NotImplementedError":
        return NotImplementedError(message)
    name = type_name if type_name.isidentifier() else "Exception"
    error = type(name, (Exception,), {})(message)
    error.learner_line = line[:120]
    return error


def _changed_arguments(reported: Any) -> list[str]:
    """The names of the arguments the worker reports changed (``[[position, name], ...]``) that the case being run
    does not let the learner's function change."""
    from mlsys_lab.argument_changes import not_allowed
    from mlsys_lab.exercises import ARGUMENTS_MAY_CHANGE

    if type(reported) is not list:
        return []
    pairs = [(p, str(n)) for p, n in (e for e in reported if type(e) is list and len(e) == 2)
             if type(p) in (int, str)]
    return not_allowed(pairs, ARGUMENTS_MAY_CHANGE.get())


def _argument_changed(name: str) -> Exception:
    """What the check reports when the worker saw the learner's function change its argument ``name`` in place."""
    from mlsys_lab.argument_changes import message
    from mlsys_lab.exercises import ArgumentChanged

    return ArgumentChanged(message(name))


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) that process ``pid`` has used so far, read from outside it.

    On Linux the process's own CPU clock (``clock_gettime`` of ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``,
    nanoseconds); elsewhere psutil's ``cpu_times`` (clock ticks), when it is installed.
    """
    if sys.platform.startswith("linux"):
        return time.clock_gettime((~pid << 3) | 2)
    import psutil  # not a dependency: timed checks need Linux or psutil when grading

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def learner_operations(obj: Any) -> frozenset[str] | None:
    """The names a learner's code may use on ``obj`` (its class's ``LEARNER_OPERATIONS``), or None: not reachable."""
    operations = getattr(type(obj), "LEARNER_OPERATIONS", None)
    if type(operations) is not frozenset or not all(type(name) is str for name in operations):
        return None
    unknown = {name for name in operations if name.startswith("_") and name not in DUNDER_OPERATIONS}
    if unknown:
        raise TypeError(f"{type(obj).__name__}.LEARNER_OPERATIONS names private attributes {sorted(unknown)}")
    return operations


class LearnerFunction:
    """Stands for the learner's function in the grader: each call is answered by the worker."""

    def __init__(self, sock: socket.socket, deadline: float, scratch_dir: str | None = None,
                 pid: int | None = None) -> None:
        self.sock, self.deadline, self.scratch_dir, self.pid = sock, deadline, scratch_dir, pid
        self.refs: list[tuple[Any, frozenset[str]]] = []  # (object, what the learner may do with it)
        self.calls = 0
        self.sizes: list[int] = []  # the length of every message received
        self.broken = False  # the conversation went wrong: the kernel must not serve another exercise
        self.used: set[str] = set()  # lesson functions the worker reported as called (library_answers)
        self.gpu_lost = False  # a sticky CUDA error in the worker: the verdict stands, the worker must not serve again

    def _hold(self, obj: Any, operations: frozenset[str]) -> list:
        self.refs.append((obj, operations))
        return [len(self.refs) - 1, sorted(operations)]

    def _handed(self, obj: Any) -> list:
        """A reference to an argument the check passes: a declared object, or a plain function it made."""
        operations = learner_operations(obj)
        if operations is None and isinstance(obj, (types.FunctionType, functools.partial)):
            operations = frozenset({"__call__"})
        if operations is None:  # the check's own mistake: a grader error, never a reachable object
            raise TypeError(f"the check passed a {type(obj).__name__}, which is neither plain data nor "
                            "declares LEARNER_OPERATIONS")
        return self._hold(obj, operations)

    def _returned(self, obj: Any) -> list:
        """A reference to a value one of our objects gave back: only another declared object."""
        operations = learner_operations(obj)
        if operations is None:
            raise wire.NotPlainData(f"it gave back a {type(obj).__name__}, which cannot cross to your code")
        return self._hold(obj, operations)

    def _deref(self, number: Any) -> Any:
        if type(number) is not int or not 0 <= number < len(self.refs):
            raise wire.NotPlainData(f"unknown reference {str(number)[:20]}")
        return self.refs[number][0]

    def serve_request(self, message: dict) -> dict:
        """Answer the worker's use of an object that stayed here, if its class lists the name it asks for.

        ``getattr``: an attribute's value (plain data or a declared object), or ``{"op": "method"}`` when it
        is a method, which the worker then calls with ``call``. ``call``: the method (or, for ``__call__``
        and the other listed dunders, the operation) with plain-data arguments or our own references.
        """
        try:
            number = message.get("ref")
            target = self._deref(number)
            operations = self.refs[number][1]
            name = message.get("name")
            if type(name) is not str or name not in operations:
                raise AttributeError(f"{type(target).__name__} offers {sorted(operations)}, not {str(name)[:40]!r}")
            if message.get("op") == "getattr" and name not in DUNDER_OPERATIONS:
                value = getattr(target, name)
                if inspect.ismethod(value):
                    return {"op": "method"}
                return {"op": "value", "value": wire.encode(value, self._returned)}
            if message.get("op") == "call":
                args = wire.decode(message.get("args"), self._deref)
                kwargs = wire.decode(message.get("kwargs"), self._deref)
                if type(args) is not list or type(kwargs) is not dict:
                    raise wire.NotPlainData("a call needs a list of arguments and a dict of keywords")
                operation = DUNDER_OPERATIONS.get(name)
                if operation is not None:
                    result = operation(target, *args, **kwargs)
                else:
                    method = getattr(target, name)
                    if not inspect.ismethod(method):
                        raise TypeError(f"{name!r} is not a method")
                    result = method(*args, **kwargs)
                return {"op": "value", "value": wire.encode(result, self._returned)}
            raise wire.NotPlainData(f"unknown request {str(message)[:60]}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # the learner's use of our object failed (or a check's kill): tell them
            return {"op": "raise", "type": type(exc).__name__, "message": f"{type(exc).__name__}: {exc}"[:500]}

    def receive(self) -> dict:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.broken = True
            raise WorkerGone("the worker did not answer in time")
        self.sock.settimeout(left)
        try:
            message = wire.receive_message(self.sock, self.sizes)
        except (OSError, EOFError, wire.NotPlainData) as exc:
            self.broken = True
            raise WorkerGone(f"the worker stopped answering ({type(exc).__name__}: {exc})") from None
        if sum(self.sizes) > MAX_RECEIVED_BYTES:  # what this exercise's conversation has made us hold
            self.broken = True
            raise WorkerGone(f"the worker sent over {MAX_RECEIVED_BYTES >> 20} MB in one exercise")
        return message

    def exchange(self, message: dict) -> Any:
        """Send a request to the worker and wait for its answer, serving its object requests meanwhile."""
        try:
            wire.send_message(self.sock, message)
        except OSError as exc:
            raise WorkerGone(f"the worker is gone ({exc})") from None
        while True:
            reply = self.receive()
            op = reply.get("op")
            if type(reply.get("used")) is list:
                self.used |= {str(u)[:80] for u in reply["used"]}
            if op == "result":
                changed = _changed_arguments(reply.get("changed"))
                if changed:
                    raise _argument_changed(changed[0][:80])
                try:
                    return wire.decode(reply.get("value"))  # plain data only: no references back
                except wire.NotPlainData as exc:
                    raise TypeError(f"the function returned something that is not plain data: {exc}") from None
            if op == "raised":
                error = _learner_error(str(reply.get("type")), str(reply.get("message")), str(reply.get("line", "")))
                if backend.context_lost(f"{error}"):  # the worker's GPU is unusable: a fresh worker serves the next
                    self.gpu_lost = True
                raise error
            if op in ("getattr", "call"):
                wire.send_message(self.sock, self.serve_request(reply))
                continue
            self.broken = True
            raise WorkerGone(f"the worker sent '{str(op)[:40]}' instead of an answer")

    def cpu_seconds_of(self, args: tuple, repeat: int) -> tuple[float, Any]:
        """(CPU seconds the worker spent on ``repeat`` calls ``fn(*args)``, the last call's result).

        The arguments cross once, before the clock starts; the clock is the worker process's own, read here
        before and after the one request that makes the calls (answered with no data); the result crosses
        after. What a learner's code reports is never the time.
        """
        if self.pid is None:
            raise WorkerGone("the grader does not know the worker's process, so it cannot time it")
        self.calls += repeat
        self.exchange({"op": "hold", "args": wire.encode(list(args), self._handed)})
        start = process_cpu_seconds(self.pid)
        self.exchange({"op": "repeat", "repeat": int(repeat)})
        seconds = process_cpu_seconds(self.pid) - start
        return seconds, self.exchange({"op": "last"})

    # A kernel exercise (mlsys_lab.exercises.cuda_kernels): NumPy arguments cross as plain data and the worker
    # copies them to its GPU; the times are this process's wall clock around requests that end with the GPU idle.
    def gpu_call(self, args: tuple) -> Any:
        """``fn(*args)`` in the worker on GPU copies of the arrays among ``args``; the result copied back."""
        self.calls += 1
        return self.exchange({"op": "call", "args": wire.encode(list(args), self._handed),
                              "kwargs": wire.encode({}), "device": True})

    def gpu_hold(self, args: tuple) -> None:
        """Send ``args`` once; the worker keeps GPU copies for :meth:`gpu_seconds`."""
        self.exchange({"op": "hold", "args": wire.encode(list(args), self._handed), "device": True})

    def gpu_seconds(self, repeat: int) -> float:
        """Wall seconds, read here, of the worker calling ``fn`` ``repeat`` times on the held arguments and then
        synchronizing its GPU (the request and its empty answer included: a socket round trip, tens of µs)."""
        self.calls += repeat
        start = time.perf_counter()
        self.exchange({"op": "repeat", "repeat": int(repeat), "sync": True})
        return time.perf_counter() - start

    def gpu_last(self) -> Any:
        """The last timed call's result, copied back from the worker's GPU."""
        return self.exchange({"op": "last"})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.exchange({"op": "call", "args": wire.encode(list(args), self._handed),
                              "kwargs": wire.encode(kwargs, self._handed)})


def run_check(sock: socket.socket, lesson: str, exercise: str, timeout_s: float,
              scratch_dir: str | None = None, pid: int | None = None) -> tuple[Any, str, list[str]]:
    """Grade one exercise over ``sock`` with the worker process ``pid``: (the check's Verdict or None, why
    there is none, library answers used)."""
    verdict, why, used = _run_check(sock, lesson, exercise, timeout_s, scratch_dir, pid)
    if verdict is None:  # end the conversation: a worker still waiting for requests gets EOF at once
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    return verdict, why, used


def _run_check(sock: socket.socket, lesson: str, exercise: str, timeout_s: float,
               scratch_dir: str | None, pid: int | None) -> tuple[Any, str, list[str]]:
    from mlsys_lab.exercises import VERDICT_SINK

    proxy = LearnerFunction(sock, time.monotonic() + timeout_s, scratch_dir, pid)
    try:
        hello = proxy.receive()
    except WorkerGone as exc:
        return None, str(exc), []
    if hello != {"op": "ready", "exercise": exercise}:
        return None, f"the worker did not start serving {exercise} (it sent {str(hello)[:60]})", []
    verdicts: list = []
    token = VERDICT_SINK.set(verdicts.append)
    try:
        check_function(lesson, exercise)(proxy)
    except WorkerGone as exc:
        return None, str(exc), sorted(proxy.used)
    finally:
        VERDICT_SINK.reset(token)
    if not verdicts:
        return None, "the check gave no verdict", sorted(proxy.used)
    if proxy.broken:  # the check saw the worker fail mid-conversation: no verdict, and a fresh kernel next
        return None, verdicts[-1].line, sorted(proxy.used)
    if proxy.gpu_lost:  # the failing line stands (as the result's message), but no Verdict object: that has the
        try:            # plugin replace this worker, whose GPU context is lost, before the next exercise
            wire.send_message(sock, {"op": "done", "line": verdicts[-1].line})
        except OSError:
            pass
        return None, verdicts[-1].line, sorted(proxy.used)
    try:
        wire.send_message(sock, {"op": "done", "line": verdicts[-1].line})
    except OSError:
        pass
    return verdicts[-1], "", sorted(proxy.used)
