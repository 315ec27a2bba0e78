"""Does every explorer in the course build, render, and survive every control being moved?

Explorers are found by walking ``mlsys_lab.widgets``: a new lesson's explorer is tested here without
being listed.
"""

import ipywidgets as widgets
import pytest

from mlsys_lab.widgets import discover_explorers

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
        explorer.set(**{name: explorer.another_value(name)})
        # Either a good update or a message in place; never an exception, never an "internal" error.
        assert explorer.error is None or not explorer.error.split(":")[0].endswith("Error"), explorer.error
        explorer.set(**{name: before})
        assert explorer.error is None, f"restoring {name} left an error: {explorer.error}"
    assert capsys.readouterr().out == ""


def _cut_off_texts(explorer) -> list[str]:
    """Tick labels, titles and axis labels that stick out of the picture (more than 2 px)."""
    figure = explorer.figure
    renderer = figure.canvas.get_renderer()
    width, height = figure.canvas.get_width_height()
    cut = []
    def drawn(axis, labels, coordinate):  # matplotlib keeps labels for ticks beyond the limits; it does not draw them
        low, high = sorted(axis.get_view_interval())
        span = (high - low) * 1e-9
        return [t for t in labels if low - span <= t.get_position()[coordinate] <= high + span]

    for ax in figure.axes:
        texts = [ax.title]
        if ax.axison:  # ax.axis("off") hides ticks and labels
            texts += [*drawn(ax.xaxis, ax.get_xticklabels(), 0), *drawn(ax.yaxis, ax.get_yticklabels(), 1),
                      ax.xaxis.label, ax.yaxis.label]
        for text in texts:
            if not text.get_visible() or not text.get_text():
                continue
            box = text.get_window_extent(renderer)
            if box.x0 < -2 or box.y0 < -2 or box.x1 > width + 2 or box.y1 > height + 2:
                cut.append(text.get_text())
    return cut


@pytest.mark.parametrize("cls", EXPLORERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[1]}.{c.__name__}")
def test_labels_stay_inside_the_picture_as_controls_move(cls):
    """The layout is re-solved only when the margins may change (widgets/base.py): check that every
    frame still fits, after each control moves and after it comes back (a cached layout)."""
    explorer = cls()
    for name, control in explorer.controls.items():
        before = control.value
        for value in (explorer.another_value(name), before):
            explorer.set(**{name: value})
            if explorer.error is None:
                assert not _cut_off_texts(explorer), f"{name}={value!r}: cut off {_cut_off_texts(explorer)}"


def test_every_lesson_widget_module_is_listed():
    """Does lesson_modules() list every widgets/<slug>.py (it imports them by name, not by string)?"""
    import pkgutil

    import mlsys_lab.widgets as package
    from mlsys_lab.widgets import lesson_modules

    on_disk = {info.name for info in pkgutil.iter_modules(package.__path__)} - {"base"}
    assert {m.__name__.rsplit(".", 1)[1] for m in lesson_modules()} == on_disk
