"""Does an explorer show bad values in place, keep working, and stay silent on stdout?"""

import ipywidgets as widgets
import numpy as np
import pytest

from mlsys_lab.validation import check_divides
from mlsys_lab.widgets.base import Explorer
from mlsys_lab.widgets.start_here import TransferExplorer


class HeadsExplorer(Explorer):
    """A minimal explorer: per-device heads for a tensor-parallel degree."""

    def make_controls(self):
        return {"n_heads": widgets.IntSlider(value=32, min=1, max=64), "tp": widgets.IntSlider(value=4, min=1, max=64)}

    def compute(self, n_heads, tp):
        check_divides("tp", tp, of_name="n_heads", of_value=n_heads)
        return n_heads // tp

    def draw(self, figure):
        self.ax = figure.add_subplot()
        (self.line,) = self.ax.plot([0, 1], [0, 1])

    def redraw(self, result):
        self.line.set_ydata([0, result])
        self.ax.set_ylim(0, 64)

    def readout_of(self, result):
        return {"heads per device": str(result)}


def test_good_value_updates_readout_and_picture():
    ex = HeadsExplorer()
    first_png = ex.image.value
    assert ex.readout == {"heads per device": "8"} and ex.error is None
    assert ex.set(tp=2) == 16
    assert ex.readout == {"heads per device": "16"}
    assert ex.image.value != first_png and ex.image.value[:4] == b"\x89PNG"


def test_bad_value_shows_message_in_place_and_widget_keeps_working():
    ex = HeadsExplorer()
    good_png = ex.image.value
    assert ex.set(tp=5) is None
    assert ex.error.startswith("tp must divide n_heads=32")
    assert "tp must divide" in ex.message.value
    assert ex.image.value == good_png  # the last good picture stays
    assert ex.set(tp=8) == 4 and ex.error is None and ex.message.value == ""


def test_slider_moves_trigger_updates_like_a_browser_would():
    ex = HeadsExplorer()
    ex.controls["tp"].value = 16  # what a drag in the browser does
    assert ex.result == 2 and ex.readout["heads per device"] == "2"


def test_set_applies_several_values_before_one_update():
    ex = HeadsExplorer()
    calls = []
    original = ex.compute
    ex.compute = lambda **v: calls.append(v) or original(**v)
    ex.set(n_heads=12, tp=3)  # tp=3 alone would be fine, n_heads=12 alone with tp=4 too: one update only
    assert calls == [{"n_heads": 12, "tp": 3}]


def test_unexpected_errors_are_shown_not_raised():
    ex = HeadsExplorer()
    ex.compute = lambda **v: np.array([1, 2])[5]
    assert ex.update() is None and ex.error.startswith("IndexError")


def test_callbacks_print_nothing(capsys):
    ex = TransferExplorer()
    ex.set(dtype="int4")
    ex.controls["n_params"].value = 1e9
    ex.set(hardware="NVIDIA A100 80GB SXM")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_unknown_control_is_named():
    ex = HeadsExplorer()
    try:
        ex.set(pp=2)
    except ValueError as exc:
        assert "unknown control(s) ['pp']" in str(exc)
    else:
        raise AssertionError("set() accepted an unknown control")


class RangeExplorer(Explorer):
    """A line whose y range grows by decades: its tick labels widen from '0' to '100000'."""

    def make_controls(self):
        return {"top": widgets.IntSlider(value=1, min=1, max=5)}

    def compute(self, top):
        return 10 ** top

    def draw(self, figure):
        self.ax = figure.add_subplot()
        (self.line,) = self.ax.plot([0, 1], [0, 1])
        self.ax.set_ylabel("value")

    def redraw(self, result):
        self.line.set_ydata([0, result])
        self.ax.set_ylim(0, result)

    def readout_of(self, result):
        return {"top": str(result)}


def test_layout_follows_wider_tick_labels_and_stays_put_otherwise():
    ex = RangeExplorer()
    narrow_left = ex.ax.get_position().x0
    ex.set(top=5)  # labels like '100000': the axes must move right to keep them in the picture
    wide_left = ex.ax.get_position().x0
    assert wide_left > narrow_left
    labels = [t for t in ex.ax.get_yticklabels() if t.get_text()]
    renderer = ex.figure.canvas.get_renderer()
    assert min(t.get_window_extent(renderer).x0 for t in labels) >= 0, "a tick label is cut off"
    ex.set(top=4)  # '10000' vs '100000' differ; back to 5 and the solved layout is reused unchanged
    ex.set(top=5)
    assert ex.ax.get_position().x0 == pytest.approx(wide_left)


def test_an_artist_named_like_a_layout_part_is_refused():
    class Clobbering(HeadsExplorer):
        def draw(self, figure):
            super().draw(figure)
            self.image = self.ax.imshow(np.zeros((2, 2)))

    with pytest.raises(TypeError, match=r"Clobbering.draw\(\) replaced self.image"):
        Clobbering()
