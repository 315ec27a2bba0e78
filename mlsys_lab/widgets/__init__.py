"""Explorers: one module per lesson (``widgets/<slug>.py``), each built on :class:`mlsys_lab.widgets.base.Explorer`.

Widgets only draw: an explorer's ``compute`` calls the lesson package's functions, and its plotting
helpers (``plot_*``, ``draw_*``) take numbers those functions returned.
"""

from __future__ import annotations

import inspect


def lesson_modules() -> list:
    """The explorer module of every lesson, in course order (importing them loads ipywidgets and matplotlib)."""
    from mlsys_lab.widgets import (
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

    return [start_here, operators, loops, roofline, memory_hierarchy, autotuning, training_memory, collectives,
            parallelism, fault_tolerance, peft, moe, capstone]


def discover_explorers() -> list[type]:
    """Every concrete Explorer subclass of every lesson (tests and benchmarks use this)."""
    from mlsys_lab.widgets.base import Explorer

    found = []
    for module in lesson_modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Explorer) and obj is not Explorer and obj.__module__ == module.__name__ \
                    and not inspect.isabstract(obj) and not getattr(obj, "abstract", False):
                found.append(obj)
    return found
