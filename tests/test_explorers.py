"""Does every explorer in the course build, render, and survive every control being moved?

Explorers are found by walking ``mlsys_lab.widgets``: a new lesson's explorer is tested here without
being listed.
"""

import importlib
import inspect
import pkgutil

import ipywidgets as widgets
import pytest

import mlsys_lab.widgets
from mlsys_lab.widgets.base import Explorer


def all_explorers():
    found = []
    for info in pkgutil.iter_modules(mlsys_lab.widgets.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"mlsys_lab.widgets.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Explorer) and obj is not Explorer and obj.__module__ == module.__name__ \
                    and not inspect.isabstract(obj) and not getattr(obj, "abstract", False):
                found.append(obj)
    return found


def other_value(control):
    """A different legal value for a control: the far end of a slider, another option of a dropdown."""
    if isinstance(control, (widgets.IntSlider, widgets.FloatSlider, widgets.FloatLogSlider, widgets.IntRangeSlider)):
        return control.max if control.value != control.max else control.min
    if isinstance(control, (widgets.Dropdown, widgets.RadioButtons, widgets.ToggleButtons, widgets.Select)):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return next((o for o in options if o != control.value), control.value)
    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return not control.value
    if isinstance(control, (widgets.BoundedIntText, widgets.BoundedFloatText)):
        return control.max if control.value != control.max else control.min
    return control.value


EXPLORERS = all_explorers()


def test_explorers_are_found():
    assert any(cls.__name__ == "TransferExplorer" for cls in EXPLORERS)


@pytest.mark.parametrize("cls", EXPLORERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[1]}.{c.__name__}")
def test_explorer_builds_and_survives_every_control(cls, capsys):
    explorer = cls()
    assert explorer.error is None, f"default values give an error: {explorer.error}"
    assert explorer.image.value[:4] == b"\x89PNG"
    assert explorer.readout, "an explorer shows at least one number"
    for name, control in explorer.controls.items():
        before = control.value
        explorer.set(**{name: other_value(control)})
        # Either a good update or a message in place; never an exception, never an "internal" error.
        assert explorer.error is None or not explorer.error.split(":")[0].endswith("Error"), explorer.error
        explorer.set(**{name: before})
        assert explorer.error is None, f"restoring {name} left an error: {explorer.error}"
    assert capsys.readouterr().out == ""
