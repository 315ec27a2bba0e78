"""The pattern every lesson's explorer follows.

An explorer is three things kept apart (the jupyter-widgets tutorial's advice):

* **layout**: controls, a readout table, a message line and one image, built once;
* **a pure computation**: :meth:`Explorer.compute` calls library functions and returns a result;
* **drawing**: :meth:`Explorer.draw` builds the figure's artists once, :meth:`Explorer.redraw`
  only moves them (``set_data``, ``set_height``), and the figure is re-rendered into the same
  ``ipywidgets.Image``. Nothing piles up, nothing flickers, nothing prints to the cell's stdout.

A bad value (a ``ValueError`` from the validation helpers) shows its message in place; the last good
picture stays and the controls keep working. Tests drive an explorer headless::

    ex = TensorParallelExplorer()
    ex.set(tp=3)            # set several controls, then update once
    ex.error                # "tp must divide n_heads=32 (allowed: ...); got 3"
    ex.readout["bytes"]     # what the readout shows, as text
"""

from __future__ import annotations

import html
import io
from typing import Any

import ipywidgets as widgets
import PIL.Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator


class Explorer:
    """Base class: subclasses define controls, compute, draw, redraw and readout_of."""

    figsize: tuple[float, float] = (6.4, 3.6)
    dpi: int = 80
    # Constrained layout costs 15-30 ms a frame. It is solved again only when what sizes the margins changed:
    # the longest tick label of an axis (in characters), the lines of titles and axis labels (a subclass
    # whose margins depend on something else sets this True and pays for a layout every frame).
    relayout_every_update: bool = False
    # Minor ticks of a log axis are a few hundred small lines per frame: about 20 ms of the 50 ms budget.
    minor_ticks_on_log_axes: bool = False

    def __init__(self) -> None:
        self.controls: dict[str, widgets.ValueWidget] = self.make_controls()
        self.message = widgets.HTML(layout=widgets.Layout(min_height="1.5em"))
        self.readout_html = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.figure = Figure(figsize=self.figsize, dpi=self.dpi, layout="constrained")
        self.draw(self.figure)
        for name, kind in (("controls", dict), ("message", widgets.HTML), ("readout_html", widgets.HTML),
                           ("image", widgets.Image)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{type(self).__name__}.draw() replaced self.{name}, which the explorer's layout "
                                "uses: give the artist another name")
        self.error: str | None = None
        self.result: Any = None
        self.readout: dict[str, str] = {}
        self._holding = False
        self._layouts: dict[tuple, list] = {}  # layout key -> the axes positions solved for it
        self._laid_out_for: tuple | None = None  # the key of the positions the figure has now
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    # --- to override -------------------------------------------------------------------------
    def make_controls(self) -> dict[str, widgets.ValueWidget]:
        raise NotImplementedError

    def compute(self, **values) -> Any:
        """Pure: control values in, result out. May raise ValueError with a learner-facing message."""
        raise NotImplementedError

    def draw(self, figure: Figure) -> None:
        """Build the axes and artists once."""

    def redraw(self, result: Any) -> None:
        """Move the artists built in :meth:`draw` to show ``result``."""

    def readout_of(self, result: Any) -> dict[str, str]:
        """The numbers to show beside the plot, already formatted."""
        return {}

    # --- machinery ---------------------------------------------------------------------------
    @property
    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def set(self, **values: Any) -> Any:
        """Set several controls, then update once; returns the result (None on a bad value)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; this explorer has {sorted(self.controls)}")
        self._holding = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._holding = False
        return self.update()

    def another_value(self, name: str) -> Any:
        """A different legal value for control ``name``: the far end of a slider, another option of a menu.

        Benchmarks and tests move every control with it; ``ex.set(**{name: ex.another_value(name)})``.
        """
        control = self.controls[name]
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

    def _on_change(self, _change: dict) -> None:
        if not self._holding:
            self.update()

    def update(self) -> Any:
        """Recompute from the controls and refresh the readout and the picture."""
        try:
            result = self.compute(**self.values)
        except ValueError as exc:
            return self._show_error(str(exc))
        except Exception as exc:  # keep the widget alive whatever happens, and say what it was
            return self._show_error(f"{type(exc).__name__}: {exc}")
        self.error, self.result = None, result
        self.message.value = ""
        self.redraw(result)
        self.readout = self.readout_of(result)
        self.readout_html.value = _table(self.readout)
        self.image.value = self.render_png()
        return result

    def _show_error(self, text: str) -> None:
        self.error = text
        self.message.value = f'<span style="color:#b00020">⚠ {html.escape(text)}</span>'
        return None

    def render_png(self) -> bytes:
        """The figure as PNG bytes (fast zlib level: the picture is redrawn on every slider move)."""
        # One Agg draw and a PIL encode: savefig would draw twice and compress harder.
        canvas = self.figure.canvas if isinstance(self.figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(self.figure)
        if not self.minor_ticks_on_log_axes:
            for ax in self.figure.axes:
                for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
                    if scale == "log":
                        axis.set_minor_locator(NullLocator())
        if self.relayout_every_update:
            canvas.draw()
        else:
            self._lay_out_and_draw(canvas)
        buffer = io.BytesIO()
        PIL.Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).save(
            buffer, format="png", compress_level=1)
        return buffer.getvalue()

    def _lay_out_and_draw(self, canvas: FigureCanvasAgg) -> None:
        """Draw once, solving the constrained layout only for margins not seen before.

        The margins depend on :meth:`_layout_key`, known before the draw. A key seen before gets the axes
        positions solved for it then (a slider moved back and forth re-solves nothing); a new key turns
        the layout engine on for this one draw and remembers the positions it found.
        """
        key = self._layout_key()
        if key == self._laid_out_for:
            canvas.draw()
            return
        if key in self._layouts:
            for ax, position in zip(self.figure.axes, self._layouts[key], strict=True):
                ax._set_position(position)  # the layout engine's own setter: keeps the axes in the layout
            canvas.draw()
        else:
            self.figure.set_layout_engine("constrained")
            canvas.draw()
            self._layouts[key] = [ax.get_position(original=True).frozen() for ax in self.figure.axes]
        self.figure.set_layout_engine("none")  # keep these positions while the margins stay the same
        self._laid_out_for = key

    def _layout_key(self) -> tuple:
        """What decides the margins: the number of axes; per axis the longest major tick label (in characters)
        and the labels on its two ends; how many lines the title and axis labels take (their words do not
        move the margins, their line count does). Tick labels come from each axis's locator and formatter,
        so the key is known before drawing."""
        def labels(axis) -> tuple[int, int, int]:
            """Longest label, and the labels at the two ends of the axis when a tick sits exactly there
            (half of such a label sticks out past the axes)."""
            if not axis.get_visible():
                return 0, 0, 0
            low, high = sorted(axis.get_view_interval())
            span = (high - low) * 1e-9
            ticks = [t for t in axis.get_major_locator()() if low - span <= t <= high + span]
            texts = axis.get_major_formatter().format_ticks(ticks)
            if not texts:
                return 0, 0, 0
            at_low = len(texts[0]) if abs(ticks[0] - low) <= span else 0
            at_high = len(texts[-1]) if abs(ticks[-1] - high) <= span else 0
            return max(len(text) for text in texts), at_low, at_high

        def lines(text: str) -> int:
            return text.count("\n") + 1 if text else 0

        return (len(self.figure.axes),) + tuple(
            (labels(ax.xaxis), labels(ax.yaxis), lines(ax.get_title()), lines(ax.get_xlabel()),
             lines(ax.get_ylabel())) for ax in self.figure.axes)

    def widget(self) -> widgets.Widget:
        controls = widgets.VBox(list(self.controls.values()))
        side = widgets.VBox([controls, self.readout_html], layout=widgets.Layout(min_width="320px"))
        return widgets.VBox([widgets.HBox([side, self.image]), self.message])

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget())


def _table(rows: dict[str, str]) -> str:
    cells = "".join(
        f"<tr><td style='padding-right:1em'>{html.escape(k)}</td><td><b>{html.escape(v)}</b></td></tr>"
        for k, v in rows.items()
    )
    return f"<table>{cells}</table>"


def slider(description: str, value: float, low: float, high: float, step: float | None = None, **kw):
    """An IntSlider when every bound is an int, else a FloatSlider; labels get room to breathe."""
    style = {"description_width": "initial"}
    if all(isinstance(v, int) for v in (value, low, high)) and (step is None or isinstance(step, int)):
        return widgets.IntSlider(value=value, min=low, max=high, step=step or 1, description=description,
                                 style=style, **kw)
    return widgets.FloatSlider(value=value, min=low, max=high, step=step or (high - low) / 100,
                               description=description, style=style, **kw)


def log_slider(description: str, value: float, low: float, high: float, **kw):
    """A slider over powers of ten (FloatLogSlider), for sizes and rates spanning decades."""
    import math

    return widgets.FloatLogSlider(value=value, base=10, min=math.log10(low), max=math.log10(high), step=0.05,
                                  description=description, style={"description_width": "initial"}, **kw)
