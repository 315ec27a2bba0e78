"""The fuzz harness: discover the library's public API, find a valid call, then break it one argument at a time.

Every public function and dataclass of ``mlsys_lab`` (less the exclusions in :data:`EXCLUDED`) gets one
*baseline* call that works (:mod:`fuzz.baselines`). Each parameter in turn is then replaced by bad and edge
values, fixed ones and a few of a pool Hypothesis generates (:mod:`fuzz.values`), and each call is judged:

=========  =================================================================================================
clear      ValueError/TypeError whose message names the parameter that was replaced
correct    a result that looks sensible: finite where the baseline was finite, not negative where the
           baseline was not, of the baseline's kind, for a value of the annotated type
unclear    any other exception, or a ValueError/TypeError that names another parameter
silent     a result for a meaningless input: NaN/inf, a negative number, another kind of result, or an
           argument of the wrong type (a float for an int, a string for a number) taken without complaint
hang       the call ran longer than :data:`TIME_LIMIT_S` (interrupted by ``signal.setitimer``)
=========  =================================================================================================
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import importlib
import inspect
import io
import math
import numbers
import os
import pickle
import pkgutil
import re
import select
import signal
import sys
import time
import types
import typing
import warnings
from contextlib import contextmanager

import numpy as np
from fuzz.values import FIXED_BAD, generated_for, generated_pool

import mlsys_lab

TIME_LIMIT_S = 1.0
TARGET_BUDGET_S = 1.0  # fuzzing one target stops (the rest counted 'skipped') past this

# Whole packages or modules left out, and why.
EXCLUDED_MODULES = {
    "mlsys_lab.widgets": "draws figures; explorers show the library's messages (issue #19, part 3)",
    "mlsys_lab.exercises": "checks of a learner's functions, not the library's API",
    "mlsys_lab.course": "instructor tools that read and write notebooks and run processes",
    "mlsys_lab.mpi": "finds and runs mpiexec (processes)",
    "mlsys_lab.cpu": "sets thread environment variables for the whole process",
    "mlsys_lab.kernels.loader": "compiles CUDA sources (needs nvcc and a GPU)",
    "mlsys_lab.collectives.launch": "launches MPI processes",
    "mlsys_lab.collectives.mpi_ring": "runs under mpiexec (processes)",
    "mlsys_lab.collectives.nccl_ring": "needs GPUs and NCCL",
    "mlsys_lab.parallelism.mpi_run": "runs under mpiexec (processes)",
    "mlsys_lab.moe.mpi_dispatch": "runs under mpiexec (processes)",
    "mlsys_lab.fault_tolerance.kill_resume": "starts and kills training processes",
    "mlsys_lab.fault_tolerance.checkpoint_io": "writes checkpoint files",
    "mlsys_lab.training_memory.weights_io": "writes weight files",
    "mlsys_lab.loops.measure": "wall-clock benchmarks: each call times kernels for seconds by design",
    "mlsys_lab.operators.measure": "wall-clock benchmarks: each call times kernels for seconds by design",
    "mlsys_lab.roofline.measured": "wall-clock benchmarks of this machine",
    "mlsys_lab.timing": "benchmark(): times a callable for as long as it is told",
}
EXCLUDED_FUNCTIONS = {
    "mlsys_lab.hardware.probe": "asks the driver (nvidia-smi) about this machine",
    "mlsys_lab.backend.describe": "asks the driver about the GPU",
    "mlsys_lab.autotuning.space.measure_cpu_tiles": "wall-clock measurement of tile configurations",
    "mlsys_lab.peft.finetune.pretrain_base": "trains a model for seconds (its baseline alone takes ~10 s)",
    "mlsys_lab.loops.matmul.matmul_microkernel": "compiles a numba kernel per (mr, nr): the timer interrupting "
                                                 "the compiler crashes the interpreter",
}
EXCLUDED_FUNCTIONS.update({
    f"mlsys_lab.validation.{check}": "an argument check itself: called with the library's own literal names and "
                                     "ranges, and a bad `value` is what it exists to judge (-1 for low=None is fine)"
    for check in ("check_int", "check_number", "check_positive", "check_finite", "check_bool", "check_type",
                  "check_array", "check_index_array", "check_choice", "check_divisible", "check_divides")})


def excluded(name: str) -> bool:
    """Is a module or function left out (see EXCLUDED_MODULES / EXCLUDED_FUNCTIONS)?"""
    return name in EXCLUDED_FUNCTIONS or any(name == m or name.startswith(m + ".") for m in EXCLUDED_MODULES)


def discover() -> dict[str, object]:
    """Every public function and dataclass defined in ``mlsys_lab``, by qualified name."""
    found = {}
    for info in pkgutil.walk_packages(mlsys_lab.__path__, "mlsys_lab."):
        if excluded(info.name):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != info.name:
                continue
            is_function = inspect.isfunction(obj)
            if is_function or (inspect.isclass(obj) and dataclasses.is_dataclass(obj)):
                qualified = f"{info.name}.{name}"
                if not excluded(qualified):
                    found[qualified] = obj
    return found


# --- judging a call ---------------------------------------------------------------------------------------

class Hang(Exception):
    """Raised by the interval timer inside a call that ran past TIME_LIMIT_S."""


def _on_alarm(signum, frame):
    raise Hang


@contextmanager
def limits():
    """A handler for the per-call interval timer; warnings and NumPy floating-point warnings silenced."""
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)


def timed_call(fn, kwargs, seconds: float = TIME_LIMIT_S):
    """``fn(**kwargs)`` under the timer: ('ok', result) or ('raised', exception) or ('hang', None)."""
    # re-fires every 0.1 s: an exception raised inside a gc callback is swallowed, the next one is not
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
    try:
        try:
            result = fn(**kwargs)
            signal.setitimer(signal.ITIMER_REAL, 0)
            return "ok", result
        except Hang:
            return "hang", None
        except Exception as error:  # noqa: BLE001 - classifying every exception is the point
            return "raised", error
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang:  # the timer fired between the call's end and the disarm
        signal.setitimer(signal.ITIMER_REAL, 0)
        return "hang", None


def _numbers(result, depth: int = 0, out: list | None = None) -> list[float]:
    """The real numbers inside a result (scalars, arrays, containers, dataclasses), at most a few thousand."""
    out = [] if out is None else out
    if depth > 4 or len(out) > 4000:
        return out
    if isinstance(result, bool):
        return out
    if isinstance(result, numbers.Real):
        out.append(float(result))
    elif isinstance(result, np.ndarray) and result.dtype.kind in "fiu":
        out.extend(result.ravel()[:4000].astype(float).tolist())
    elif isinstance(result, dict):
        for v in list(result.values())[:200]:
            _numbers(v, depth + 1, out)
    elif isinstance(result, (list, tuple)):
        for v in result[:200]:
            _numbers(v, depth + 1, out)
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        for f in dataclasses.fields(result)[:50]:
            _numbers(getattr(result, f.name, None), depth + 1, out)
    return out


def _kind(result) -> str:
    if isinstance(result, bool):
        return "bool"
    if isinstance(result, numbers.Real):
        return "number"
    return type(result).__name__


def _matches(value, hint) -> bool:
    """Does ``value`` have the annotated type? True when the annotation is one this check cannot judge."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (bool,):
        return isinstance(value, (bool, np.bool_))
    return True


def names_parameter(message: str, parameter: str) -> bool:
    """Does an error message name the parameter (as a word: ``n_heads`` in "n_heads must be ...")?"""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(parameter)}(?![A-Za-z0-9_])", message) is not None


def classify(status: str, outcome, parameter: str, value, hint, baseline) -> tuple[str, str]:
    """(class, detail) of one call: clear / correct / unclear / silent / hang."""
    if status == "hang":
        return "hang", f"> {TIME_LIMIT_S} s"
    if status == "raised":
        text = f"{type(outcome).__name__}: {str(outcome)[:160]}"
        if isinstance(outcome, (ValueError, TypeError)) and names_parameter(str(outcome), parameter):
            return "clear", text
        return "unclear", text
    if not _matches(value, hint):
        return "silent", f"took {value!r:.40} for a {getattr(hint, '__name__', hint)}"
    vectorized = isinstance(value, (np.ndarray, list)) and _kind(outcome) == "ndarray" and _kind(baseline) == "number"
    if _kind(outcome) != _kind(baseline) and not vectorized:  # an array in, an array out: a vectorized function
        return "silent", f"returned a {_kind(outcome)}, the baseline a {_kind(baseline)}"
    got, base = _numbers(outcome), _numbers(baseline)
    if base and all(math.isfinite(x) for x in base) and not all(math.isfinite(x) for x in got):
        return "silent", "NaN or inf in the result"
    if base and min(base) >= 0 and got and min(got) < 0:
        return "silent", f"negative result {min(got):g}"
    return "correct", ""


# --- fuzzing one target -----------------------------------------------------------------------------------

def parameters(target) -> list[inspect.Parameter]:
    """The parameters a caller passes by name (no *args/**kwargs)."""
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    return [p for p in inspect.signature(target).parameters.values() if p.kind not in kinds]


def hints_of(target) -> dict:
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an unresolvable annotation only means the type check is skipped
        return {}


def fuzz_target(target, baseline_kwargs: dict, baseline_result) -> list[tuple[str, str, str, str]]:
    """Calls with one parameter replaced at a time: a list of (parameter, value text, class, detail)."""
    records = []
    hints = hints_of(target)

    start = time.perf_counter()
    hung: set[str] = set()

    def probe(parameter: str, label: str, value) -> None:
        # one hang of a parameter is enough evidence; past the target's budget the remaining calls are skipped
        if parameter in hung or time.perf_counter() - start > TARGET_BUDGET_S:
            records.append((parameter, label, "skipped", "budget spent" if parameter not in hung else "hung"))
            return
        kwargs = copy.deepcopy(baseline_kwargs)
        kwargs[parameter] = value
        status, outcome = timed_call(target, kwargs)
        cls, detail = classify(status, outcome, parameter, value, hints.get(parameter, inspect.Parameter.empty),
                               baseline_result)
        records.append((parameter, label, cls, detail))
        if cls == "hang":
            hung.add(parameter)

    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    for p in parameters(target):
        for label, value in FIXED_BAD:
            probe(p.name, label, copy.deepcopy(value))
        if any(r[0] == p.name and r[2] in ("unclear", "silent", "hang") for r in records):
            continue  # the pair already fails: more values would not change its verdict
        for label, value in generated_for(name, p.name):
            probe(p.name, label, copy.deepcopy(value))
    return records


def _fuzz_in_child(names: list[str], found: dict, baselines_for) -> tuple[dict, str | None, str]:
    """Fuzz ``names`` in one forked child, streaming one message per target back through a pipe.

    A child keeps a segfault (a numba kernel given a bad size, a compiler interrupted by the timer) or a
    hang the timer cannot interrupt (C code that never checks signals) from taking the whole suite down.
    Returns ({name: records or None}, the target it was on when it died or None, why it died).
    One child per module, not per target: forking and warming numba up 500 times costs more than the fuzzing.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        with os.fdopen(write_fd, "wb") as pipe:
            for name in names:
                pickle.dump(("start", name, None), pipe)
                pipe.flush()
                with limits():
                    base = baselines_for(name, found[name])
                    records = None if base is None else [tuple(map(str, r)) for r in fuzz_target(found[name], *base)]
                pickle.dump(("done", name, records), pipe)
                pipe.flush()
        os._exit(0)
    os.close(write_fd)
    results, current, why = {}, None, ""
    deadline = time.monotonic() + CHILD_DEADLINE_S * max(1, len(names))
    buffer = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                why = "no answer in time (killed)"
                break
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            buffer += chunk
            while True:
                try:
                    view = io.BytesIO(buffer)
                    kind, name, records = pickle.load(view)
                except (EOFError, pickle.UnpicklingError, ValueError):
                    break  # an incomplete message: wait for more
                buffer = buffer[view.tell():]
                if kind == "start":
                    current = name
                else:
                    results[name], current = records, None
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and not why:
        why = f"killed by signal {os.WTERMSIG(status)}"
    return results, current, why


CHILD_DEADLINE_S = 30.0  # per target


def restricted() -> list[str]:
    """The modules named by ``MLSYS_FUZZ_MODULES`` (comma-separated, e.g. ``mlsys_lab.moe,mlsys_lab.roofline.model``)
    to fuzz alone while iterating; empty: the whole library."""
    return [m.strip() for m in os.environ.get("MLSYS_FUZZ_MODULES", "").split(",") if m.strip()]


def run(baselines_for, log=print, trace: bool = False) -> dict:
    """Fuzz the whole library: {'covered': [...], 'uncovered': [...], 'calls': [(target, param, value, cls, detail)]}.

    Each module runs in a forked child (see :func:`_fuzz_in_child`); a target whose child crashes counts
    as one 'unclear' call, and the module's remaining targets go on in a fresh child.
    """
    found = discover()
    if restricted():
        found = {name: obj for name, obj in found.items()
                 if any(name == m or name.startswith(m + ".") for m in restricted())}
    covered, uncovered, calls = [], [], []
    # a forked child's first garbage collection would walk (and so copy, page by page) every object the
    # library's import made: ~1 s per module. Frozen objects are left out of collections.
    generated_pool()  # drawn once here, inherited by every child
    gc.collect()
    gc.freeze()
    by_module: dict[str, list[str]] = {}
    for name in sorted(found):
        by_module.setdefault(name.rsplit(".", 1)[0], []).append(name)
    start = time.perf_counter()
    for module, names in by_module.items():
        if trace:
            print(module, file=sys.stderr, flush=True)
        todo = list(names)
        while todo:
            results, crashed_on, why = _fuzz_in_child(todo, found, baselines_for)
            for name in todo:
                if name in results:
                    if results[name] is None:
                        uncovered.append(name)
                    else:
                        covered.append(name)
                        calls.extend((name, *record) for record in results[name])
            if crashed_on is None and not why:
                break
            if crashed_on is None and not results:  # died before reporting any target: blame the first
                crashed_on = todo[0]
            if crashed_on is not None:
                covered.append(crashed_on)
                calls.append((crashed_on, "*", "?", "unclear", f"the process crashed: {why}"))
            done = set(results) | {crashed_on}
            todo = [name for name in todo if name not in done]
    log(f"fuzzed {len(by_module)} modules in {time.perf_counter() - start:.0f} s")
    return {"covered": covered, "uncovered": uncovered, "calls": calls, "found": len(found), "names": sorted(found)}
