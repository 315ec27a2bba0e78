"""Your pieces carry forward: what you write in one lesson is what later lessons run.

When a check passes in your notebook, :func:`keep` records the cell that defined your function (its source, the
exercise, the lesson, when) in a folder of yours, ``~/.mlsys_lab/pieces`` (or ``MLSYS_LAB_PIECES``; ``off``
records nothing). A file survives a kernel restart and works the same in ``make lab``, on Colab (while the runtime
lives) and on Binder (while the session lives). A later lesson, or the capstone, asks for a piece by name and
passes the course's own version::

    ring_allreduce = piece("ring_allreduce", course=simulate.ring_allreduce)
    # prints  ring_allreduce: yours (lesson 07, checked 2026-12-02 14:03)
    #    or   ring_allreduce: the course's (yours is not written yet)

Your piece is loaded by running its recorded cell in a fresh namespace. One that does not load, or that raises
when a later lesson runs it, is named in the message, and ``use_course("ring_allreduce")`` switches the course's
version in for it from then on (``use_yours`` switches back). :func:`pieces_table` lists what you have.
"""

from __future__ import annotations

import datetime as _dt
import functools
import inspect
import json
import linecache
import os
import types
from pathlib import Path
from typing import Any, Callable

STORE_ENV = "MLSYS_LAB_PIECES"
LESSONS = ("start_here", "operators", "loops", "roofline", "memory_hierarchy", "autotuning", "training_memory",
           "collectives", "parallelism", "fault_tolerance", "peft", "moe", "capstone")
# A piece kept before its record named the modules it reads gets the imports every lesson's first cell makes.
OLDER_RECORDS_MODULES = {"np": "numpy", "os": "os", "math": "math"}
_loading: list[bool] = [False]  # a recorded cell that calls a check must not record again while it loads


def store_folder() -> Path | None:
    """Where pieces are kept (``MLSYS_LAB_PIECES``, default ``~/.mlsys_lab/pieces``); None when it is ``off``."""
    setting = os.environ.get(STORE_ENV, "")
    if setting == "off":
        return None
    return Path(setting).expanduser() if setting else Path.home() / ".mlsys_lab" / "pieces"


def lesson_of_check_module(module_name: str) -> str:
    """``"mlsys_lab.exercises.parallelism_ddp"`` -> ``"08 parallelism"``: the lesson a check module belongs to."""
    tail = module_name.rsplit(".", 1)[-1]
    for number, slug in sorted(enumerate(LESSONS), key=lambda item: -len(item[1])):
        if tail == slug or tail.startswith(slug + "_"):
            return f"{number:02d} {slug}"
    return tail


def cell_source(fn: Callable) -> str | None:
    """The whole notebook cell (or file) that defined ``fn``: what it needs besides itself comes with it."""
    try:
        filename = inspect.getsourcefile(fn)
    except TypeError:
        return None
    lines = linecache.getlines(filename) if filename else []
    return "".join(lines) or None


def modules_read(fn: Callable) -> dict[str, str]:
    """The modules ``fn`` reads by a global name (``{"np": "numpy"}``): a notebook imports them in an earlier cell
    than the exercise's, so they come back as imports when the piece is loaded alone."""
    names, codes = set(), [getattr(fn, "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    found = {}
    for name in sorted(names):
        value = getattr(fn, "__globals__", {}).get(name)
        if isinstance(value, types.ModuleType):
            found[name] = value.__name__
    return found


def _path(name: str) -> Path | None:
    folder = store_folder()
    return None if folder is None else folder / f"{name}.json"


def keep(name: str, fn: Callable, lesson: str) -> Path | None:
    """Record ``fn`` as your piece ``name`` (called by a check that passed in your notebook); where it went."""
    path = _path(name)
    source = cell_source(fn) if isinstance(fn, types.FunctionType) else None
    if path is None or source is None or _loading[0]:
        return None
    record = {"name": name, "function": fn.__name__, "lesson": lesson, "source": source, "use": "yours",
              "modules": modules_read(fn),
              "checked": _dt.datetime.now().strftime("%Y-%m-%d %H:%M")}
    old = _read(name)
    if old is not None and old.get("use") == "course":
        record["use"] = "course"  # a choice made with use_course stands until use_yours
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a read-only home: the lesson still works, the piece is not kept
        return None
    return path


def _read(name: str) -> dict | None:
    path = _path(name)
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, ValueError):
        return None


def _set_use(name: str, use: str) -> None:
    record = _read(name)
    if record is None:
        print(f"{name}: you have no piece of that name yet")
        return
    record["use"] = use
    _path(name).write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"{name}: {'the course' + chr(39) + 's' if use == 'course' else 'your'} version from now on")


def use_course(name: str) -> None:
    """Run the course's ``name`` instead of yours from now on (yours stays recorded)."""
    _set_use(name, "course")


def use_yours(name: str) -> None:
    """Run your ``name`` again."""
    _set_use(name, "yours")


def load_piece(name: str) -> tuple[Callable | None, str]:
    """Your piece ``name`` as a function, or None and why not."""
    record = _read(name)
    if record is None:
        return None, "yours is not written yet"
    if record.get("use") == "course":
        return None, f"you chose it with use_course({name!r}); use_yours({name!r}) switches back"
    namespace: dict[str, Any] = {"__name__": f"mlsys_lab_piece_{name}"}
    modules = record.get("modules", OLDER_RECORDS_MODULES)
    prelude = "".join(f"import {module} as {alias}\n" for alias, module in modules.items()
                      if alias.isidentifier() and all(part.isidentifier() for part in module.split(".")))
    _loading[0] = True
    try:
        exec(compile(prelude + _as_python(record["source"]), f"<your {name}, lesson {record['lesson']}>", "exec"),
             namespace)
    except Exception as exc:  # the learner's cell needs something it does not define: say what
        return None, f"yours did not load ({type(exc).__name__}: {exc})"
    finally:
        _loading[0] = False
    fn = namespace.get(record["function"])
    if not callable(fn):
        return None, f"yours did not load (its cell no longer defines {record['function']})"
    return fn, f"yours (lesson {record['lesson']}, checked {record['checked']})"


def _as_python(source: str) -> str:
    """A notebook cell as Python (IPython's magics turned into calls) when IPython is there."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


def piece(name: str, course: Callable, quiet: bool = False) -> Callable:
    """Yours, else the course's: the function a later lesson runs for ``name``, and one line saying which.

    A piece of yours that raises when the lesson runs it raises again with its name and the way back to the
    course's version, so that a later lesson's own messages stay readable.
    """
    if not callable(course):
        raise TypeError(f"course must be the course's function for {name!r}, got {type(course).__name__}")
    fn, why = load_piece(name)
    if not quiet:
        print(f"{name}: {why}" if fn is not None else f"{name}: the course's ({why})")
    if fn is None:
        return course

    @functools.wraps(fn)
    def yours(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise PieceFailed(f"your {name} raised {type(exc).__name__}: {exc} (use_course({name!r}) runs the "
                              "course's instead)") from exc

    yours.is_yours = True
    return yours


class PieceFailed(RuntimeError):
    """A piece of the learner's raised when a later lesson ran it."""


def pieces_table() -> list[dict[str, str]]:
    """What you have: name, lesson, when it was checked, and whose version runs."""
    folder = store_folder()
    if folder is None or not folder.is_dir():
        return []
    rows = []
    for path in sorted(folder.glob("*.json")):
        record = _read(path.stem)
        if record is not None:
            rows.append({key: record.get(key, "") for key in ("name", "lesson", "checked", "use")})
    return rows
