"""Does every explorer in the course build, render, and survive every control being moved?

Explorers are found by walking ``mlsys_lab.widgets``: a new lesson's explorer is tested here without
being listed.
"""

import ipywidgets as widgets
import pytest

from mlsys_lab.widgets import discover_explorers, other_value

EXPLORERS = discover_explorers()


def test_explorers_are_found():
    assert any(cls.__name__ == "TransferExplorer" for cls in EXPLORERS)


@pytest.mark.parametrize("cls", EXPLORERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[1]}.{c.__name__}")
def test_explorer_builds_and_survives_every_control(cls, capsys):
    explorer = cls()
    assert isinstance(explorer.widget(), widgets.Widget)  # what a notebook displays
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
