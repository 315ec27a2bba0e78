"""Explorers: one module per lesson, each built on :class:`mlsys_lab.widgets.base.Explorer`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil


def discover_explorers() -> list[type]:
    """Every concrete Explorer subclass defined in ``mlsys_lab.widgets.*`` (tests and benchmarks use this)."""
    from mlsys_lab.widgets.base import Explorer

    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Explorer) and obj is not Explorer and obj.__module__ == module.__name__ \
                    and not inspect.isabstract(obj) and not getattr(obj, "abstract", False):
                found.append(obj)
    return found


def other_value(control):
    """A different legal value for a control: the far end of a slider, another option of a dropdown."""
    import ipywidgets as widgets

    ranged = (widgets.IntSlider, widgets.FloatSlider, widgets.FloatLogSlider, widgets.BoundedIntText,
              widgets.BoundedFloatText)
    if isinstance(control, ranged):
        return control.max if control.value != control.max else control.min
    if isinstance(control, (widgets.Dropdown, widgets.RadioButtons, widgets.ToggleButtons, widgets.Select)):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return next((o for o in options if o != control.value), control.value)
    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return not control.value
    return control.value
