"""Recorded results of the course's reference code: how a class release checks without answer keys.

``mlsys-lab release`` (:mod:`mlsys_lab.course.release`) runs every check of the full course with the release's
seed and records, as JSON data, what each reference function returned for each call it got (the arguments only
as a hash, the results as typed JSON). A release ships this module as ``mlsys_lab/exercises/recorded.py`` beside
``recorded.json``: its check modules keep their case builders, comparisons and budgets (simulated networks,
recording groups: lesson code, not answers), and each reference function is replaced by a :func:`stand_in`
that answers from the record. The release's ``rng`` always draws the release's seed, so a check builds the very
cases that were recorded. A call the record does not hold (arguments that depend on the learner's answer, a
reference whose result is code) raises :class:`NotRecorded`; :func:`release_check` turns it into
"… <name>: this release cannot check it here; your instructor grades it", never a wrong ✓ or ✗.
"""

from __future__ import annotations

import base64
import builtins
import functools
import hashlib
import json
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import Any, Callable

import numpy as np

RECORD_FILE = "recorded.json"
FORMAT = 1
NOTE = "(the release checks {n} fixed cases; your instructor grades hidden ones)"
CODE = (FunctionType, MethodType, BuiltinFunctionType, type, functools.partial)  # keyed by name, never stored
CANNOT = "this release cannot check it here; your instructor grades it"


class Unrecordable(TypeError):
    """A value that cannot be keyed or stored as plain data (code, a file handle, a cycle)."""


class NotRecorded(BaseException):  # not an Exception: evaluate() must not read it as the learner's failure
    """A reference call whose result the release does not hold."""


# ------------------------------------------------------------------ keys: one string per argument list
def canonical(value: Any, depth: int = 0) -> str:
    """A string equal for equal arguments (exact bits of floats and arrays) on any machine and run."""
    if depth > 30:
        raise Unrecordable("nested too deeply (a cycle?)")
    d = depth + 1
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, np.generic):
        return f"np{value.dtype.str}:{value.tobytes().hex()}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, (bytes, bytearray)):
        return "b" + hashlib.sha256(value).hexdigest()
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return f"ndO{value.shape}" + canonical(value.tolist(), d)
        return f"nd{value.dtype.str}{value.shape}:" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    if isinstance(value, (list, tuple)):
        inner = ",".join(canonical(v, d) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{canonical(k, d)}:{canonical(v, d)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        return "set" + ",".join(sorted(canonical(v, d) for v in value))
    if isinstance(value, CODE):
        return f"code:{getattr(value, '__module__', '')}.{value.__qualname__}"
    state = _state(value)
    if state is not None:
        return f"obj:{_type_name(type(value))}" + canonical(state, d)
    raise Unrecordable(f"a {type(value).__name__}")


def call_key(args: tuple, kwargs: dict) -> str:
    """The record's key of one call."""
    return hashlib.sha256(canonical((tuple(args), dict(kwargs))).encode()).hexdigest()[:40]


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _state(value: Any) -> dict | None:
    """The attributes of a plain object (dataclass fields, __dict__ and __slots__), or None."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    state = dict(vars(value)) if hasattr(value, "__dict__") else {}
    for slot in getattr(type(value), "__slots__", ()):
        if hasattr(value, slot):
            state[slot] = getattr(value, slot)
    return state if (state or hasattr(value, "__dict__")) else None


# ------------------------------------------------------------------ values: typed JSON
def to_record(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data that :func:`from_record` turns back into an equal value of the same types."""
    if depth > 30:
        raise Unrecordable("nested too deeply (a cycle?)")
    d = depth + 1
    if value is None or isinstance(value, (bool, str)) or type(value) in (int, float):
        return value
    if isinstance(value, np.generic):
        return {"$np": value.dtype.str, "data": base64.b64encode(value.tobytes()).decode()}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return {"$ndarray_object": list(value.shape), "items": to_record(value.ravel().tolist(), d)}
        data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode()
        return {"$ndarray": value.dtype.str, "shape": list(value.shape), "data": data}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"$namedtuple": _type_name(type(value)), "items": [to_record(v, d) for v in value]}
    if type(value) is list:
        return [to_record(v, d) for v in value]
    if type(value) is tuple:
        return {"$tuple": [to_record(v, d) for v in value]}
    if type(value) is dict:
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: to_record(v, d) for k, v in value.items()}
        return {"$dict": [[to_record(k, d), to_record(v, d)] for k, v in value.items()]}
    if type(value) in (set, frozenset):
        return {"$" + type(value).__name__: [to_record(v, d) for v in value]}
    if isinstance(value, (int, float)) and type(value).__module__ == "builtins":
        return value
    state = None if isinstance(value, CODE) else _state(value)
    if state is None:
        raise Unrecordable(f"a {type(value).__name__}")
    return {"$object": _type_name(type(value)), "state": to_record(state, d)}


def from_record(data: Any) -> Any:
    """The value :func:`to_record` stored."""
    if isinstance(data, list):
        return [from_record(v) for v in data]
    if not isinstance(data, dict):
        return data
    tag = next(iter(data), "")
    if not tag.startswith("$"):
        return {k: from_record(v) for k, v in data.items()}
    if tag == "$np":
        return np.frombuffer(base64.b64decode(data["data"]), dtype=np.dtype(data["$np"]))[0]
    if tag == "$ndarray":
        raw = base64.b64decode(data["data"])
        return np.frombuffer(raw, dtype=np.dtype(data["$ndarray"])).reshape(data["shape"]).copy()
    if tag == "$ndarray_object":
        out = np.empty(len(data["items"]), dtype=object)
        out[:] = from_record(data["items"])
        return out.reshape(data["$ndarray_object"])
    if tag == "$bytes":
        return base64.b64decode(data["$bytes"])
    if tag == "$tuple":
        return tuple(from_record(v) for v in data["$tuple"])
    if tag == "$dict":
        return {_hashable(from_record(k)): from_record(v) for k, v in data["$dict"]}
    if tag in ("$set", "$frozenset"):
        items = (_hashable(from_record(v)) for v in data[tag])
        return set(items) if tag == "$set" else frozenset(items)
    if tag == "$namedtuple":
        return _find_type(data["$namedtuple"])(*(from_record(v) for v in data["items"]))
    if tag == "$object":
        cls = _find_type(data["$object"])
        obj = cls.__new__(cls)
        _restore_state(obj, from_record(data["state"]))
        return obj
    raise ValueError(f"unknown recorded tag {tag!r}")


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _find_type(name: str) -> type:
    """A class by ``module:qualname`` among the modules already imported (the check that needs it imported them)."""
    module_name, qualname = name.split(":")
    target: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not isinstance(target, type):
        raise NotRecorded(f"the recorded result is a {name}, which is not loaded here")
    return target


def _restore_state(obj: Any, state: dict) -> None:
    for name, value in state.items():
        object.__setattr__(obj, name, value)


def restore(target: Any, value: Any) -> None:
    """Put the state a reference left in a mutable argument back into ``target`` (the caller's own object)."""
    if isinstance(target, np.ndarray):
        target[...] = value
    elif isinstance(target, list):
        target[:] = value
    elif isinstance(target, dict):
        target.clear()
        target.update(value)
    else:
        _restore_state(target, _state(value) or {})


# ------------------------------------------------------------------ the release's side
@functools.lru_cache(maxsize=1)
def record() -> dict:
    """The release's record (``recorded.json`` beside this module)."""
    path = Path(__file__).with_name(RECORD_FILE)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"seed": 0, "calls": {}}


def stand_in(qualified: str) -> Callable:
    """The callable that replaces reference function ``module:name`` in a release: it answers from the record."""
    name = qualified.rsplit(":", 1)[1]

    def recorded_result(*args, **kwargs):
        try:
            entry = record()["calls"].get(qualified, {}).get(call_key(args, kwargs))
        except Unrecordable:
            entry = None
        if entry is None:
            raise NotRecorded(qualified)
        for where, state in entry.get("mutates", {}).items():
            restore(args[int(where)] if where.isdigit() else kwargs[where], from_record(state))
        if "raises" in entry:
            kind, message = entry["raises"]
            error = getattr(builtins, kind, None)
            raise (error(message) if isinstance(error, type) and issubclass(error, Exception)
                   else RuntimeError(f"{kind}: {message}"))
        return from_record(entry["result"])

    recorded_result.__name__ = recorded_result.__qualname__ = name
    recorded_result.__doc__ = (f"The course's ``{name}`` on this release's fixed cases, from recorded data "
                               "(the code stays with the instructor).")
    return recorded_result


def release_rng() -> np.random.Generator:
    """The random cases of a release: always the release's seed, which is what its record holds."""
    return np.random.default_rng(int(record()["seed"]))


def _report(verdict: Any) -> Any:
    from mlsys_lab.exercises import report  # here, not at the top: exercises/__init__ imports this module last

    return report(verdict)


def release_check(name: str, fn: Callable, cases, compare: Callable | None = None, figure: Callable | None = None):
    """``check`` in a release: the same verdict line on the release's fixed cases, with a note saying so.

    The performance ``figure`` of a kernel exercise is the grader's: a release does not compute it.
    """
    from mlsys_lab.exercises import TODO, Verdict, close_enough, evaluate

    cases = list(cases)
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return fn(*args, **kwargs)

    try:
        verdict = evaluate(name, counted, cases, compare or close_enough)
    except NotRecorded:
        done = f"{calls[0] - 1}/{len(cases)} cases pass, then " if calls[0] > 1 else ""
        return _report(Verdict(name, TODO, f"{TODO} {name}: {done}{CANNOT}", len(cases)))
    if verdict.status != TODO:
        verdict = Verdict(name, verdict.status, f"{verdict.line} {NOTE.format(n=len(cases))}", verdict.n_cases)
    return _report(verdict)


def guard_checks(namespace: dict) -> None:
    """Wrap each ``check_<name>`` of a release module: a case it cannot even build says so instead of raising."""
    from mlsys_lab.exercises import TODO, Verdict

    def guarded(check_fn: Callable, name: str) -> Callable:
        @functools.wraps(check_fn)
        def run(fn):
            try:
                return check_fn(fn)
            except NotRecorded:
                return _report(Verdict(name, TODO, f"{TODO} {name}: {CANNOT}", 0))

        run.guarded = True
        return run

    for key, value in list(namespace.items()):
        if (key.startswith("check_") and callable(value) and not getattr(value, "guarded", False)
                and getattr(value, "__module__", None) == namespace.get("__name__")):
            namespace[key] = guarded(value, key.removeprefix("check_"))
