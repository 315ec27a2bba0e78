"""Did a function change, in place, an array it was given? What a check tells a learner before comparing values.

An exercise's check calls the learner's function with arrays it keeps (to compute the expected answer, or to call
again). A function that updates its argument in place (``w -= lr * g``, ``x[mask] = 0``, ``np.exp(x, out=x)``)
may return the right value and still break the check's next step, which would then blame the maths. So a check
takes a :func:`snapshot_arrays` of the arrays before the call and asks :func:`changed` after it; the first changed
one is named in :func:`message`. The grader's worker does the same on its side of the socket (its arrays are copies of
the check's, so only it can see the change) and reports the names.

    >>> import numpy as np
    >>> def step(w, g):
    ...     w -= 0.5 * g
    ...     return w
    >>> w, g = np.ones(3), np.ones(3)
    >>> before = snapshot_arrays(step, (w, g), {})
    >>> _ = step(w, g)
    >>> changed(before), changed(before, allowed=(0,))
    (['w'], [])
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

MAX_SNAPSHOT_BYTES = 1 << 28  # arrays beyond this many bytes in all are not copied (a kernel exercise's large case)


def argument_names(fn: Callable, n_positional: int) -> list[str]:
    """The parameter names of ``fn``'s first ``n_positional`` positional parameters, where its signature tells them
    (``*args`` and unknown signatures give ``argument 1``, ``argument 2``, ...)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    named = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [named[i] if i < len(named) else f"argument {i + 1}" for i in range(n_positional)]


Snapshot = dict[str, tuple[int | str, np.ndarray, np.ndarray]]  # name -> (position or keyword, array, its copy)


def snapshot_arrays(fn: Callable, args: tuple | list, kwargs: dict) -> Snapshot:
    """``{name: (position, the array passed, a copy of it)}`` for every numeric NumPy array among ``args`` and
    ``kwargs``, and one level inside a dict, list or tuple argument (``state['m']``, ``grads[2]``); ``position`` is
    the argument's index, or its keyword."""
    found: Snapshot = {}
    total = [0]

    def add(name: str, position: int | str, value: Any) -> None:
        numeric = isinstance(value, np.ndarray) and value.dtype.kind in "biufc"
        if numeric and total[0] + value.nbytes <= MAX_SNAPSHOT_BYTES:
            total[0] += value.nbytes
            found[name] = (position, value, value.copy())

    named = [(name, i, value) for i, (name, value) in enumerate(zip(argument_names(fn, len(args)), args, strict=True))]
    named += [(name, name, value) for name, value in kwargs.items()]
    for name, position, value in named:
        add(name, position, value)
        if isinstance(value, dict):
            for key, item in list(value.items())[:64]:
                add(f"{name}[{key!r}]", position, item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value[:64]):
                add(f"{name}[{i}]", position, item)
    return found


def changes(before: Snapshot) -> list[tuple[int | str, str]]:
    """``(position, name)`` of each array of ``before`` whose values are no longer the ones copied (NaN equals NaN)."""
    return [(position, name) for name, (position, array, copy) in before.items()
            if array.shape != copy.shape or not np.array_equal(array, copy, equal_nan=array.dtype.kind in "fc")]


def changed(before: Snapshot, allowed: bool | tuple = ()) -> list[str]:
    """The names of the changed arrays (:func:`changes`) except those at a position or keyword in ``allowed``
    (``True``: every argument may change)."""
    return not_allowed(changes(before), allowed)


def not_allowed(found: list, allowed: bool | tuple) -> list[str]:
    """The names among ``(position, name)`` pairs whose argument is not in ``allowed``."""
    if allowed is True:
        return []
    allowed = () if allowed is False else allowed
    return [str(name) for position, name in found if position not in allowed]


def message(name: str) -> str:
    """What the learner reads: the argument, and the two usual ways out."""
    base = name.split("[", 1)[0]
    what = f"its argument `{name}`" if base.isidentifier() else name
    base = base if base.isidentifier() else "x"
    return (f"your function changed {what} in place (an update such as `{base} -= ...` or `{base}[...] = ...`); "
            f"the check needs its arguments as they were: work on a copy (`{base} = {base}.copy()`) or build a "
            "new array")
