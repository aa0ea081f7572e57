"""`MPLLive2DPlot`: a live plot drawn with matplotlib, redrawn at most twice a second (as LiberTEM's).

In Jupyter with the inline back-end the figure appears with the cell's
output, showing the final data; with ``%matplotlib widget`` (ipympl) or a
GUI back-end it updates while the run goes on.

Drawing never holds up the run. On an interactive back-end the figure, its
Axes and image are made when the plot is displayed; an update sets the
image's data and colour limits and asks for a redraw with ``draw_idle``
(done by the back-end's event loop). A non-interactive back-end (Agg,
Jupyter's inline) renders a figure only when it is shown or saved, so
drawing after every update (~30 ms a figure) would be thrown away, and so
would the Axes made before anything can be seen (~5 ms of CPU a figure,
taken from the run's workers): the figure is made at once (pyplot lists it,
Jupyter shows it), its Axes, image and colour limits when it is first drawn
or read, from the latest data (:class:`~raytile.viz.deferred_figure.DeferredFigure`).
Such a plot shows no partial result, so ``run_udf(..., plots=...)`` asks
for none (:meth:`MPLLive2DPlot.shows_partial_results`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from raytile.viz.live import Live2DPlot, color_limits

__all__ = ["MPLLive2DPlot"]


class MPLLive2DPlot(Live2DPlot):
    """A matplotlib ``imshow`` of the channel; ``min_delta`` (default 0.5 s) between redraws; ``**kwargs``
    go to ``imshow``. ``fig``, ``axes``, ``im_obj`` are the figure, its axes and the image (None before
    :meth:`display`)."""

    def __init__(self, dataset: Any, udf: Any, roi: Any = None, channel: Any = None, title: str | None = None,
                 min_delta: float = 0.5, udfresult: Any = None, **kwargs: Any):
        super().__init__(dataset=dataset, udf=udf, roi=roi, channel=channel, title=title, min_delta=min_delta,
                         udfresult=udfresult)
        self.kwargs = kwargs
        self.fig: Any = None
        self._axes: Any = None
        self._im: Any = None
        self._pending: Any = None  # the damage of data not yet in the image (None: the image is current)
        self._draws_now = False  # an interactive back-end: each update redraws (else: when drawn, deferred)

    @classmethod
    def shows_partial_results(cls) -> bool:
        """Only on an interactive back-end (Qt, Tk, ipympl...): Agg and Jupyter's inline draw the final data."""
        return _interactive()

    @property
    def axes(self) -> Any:
        """The figure's Axes (made now if they were deferred)."""
        self._prepare()
        return self._axes

    @property
    def im_obj(self) -> Any:
        """The ``imshow`` image, with the latest data (made or refreshed now if that was deferred)."""
        self._prepare()
        return self._im

    def display(self) -> None:
        import matplotlib.pyplot as plt

        self._draws_now = _interactive()
        if self._draws_now:
            self.fig = plt.figure()
            self._prepare()
        else:
            from raytile.viz.deferred_figure import DeferredFigure

            self.fig = plt.figure(FigureClass=DeferredFigure)
            self.fig.defer(self._prepare)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "FigureCanvasAgg is non-interactive" when headless
            self.fig.show()
        self.shown()

    def update(self, damage: Any, force: bool = False) -> None:
        if self.fig is None:
            warnings.warn("Plot is not displayed, not plotting. Call display() to display the plot.")
            return
        self._pending = damage
        if self._draws_now:
            self._prepare()
            self.fig.canvas.draw_idle()
            self.fig.canvas.flush_events()

    def _prepare(self, figure: Any = None) -> None:
        """Make the Axes and image if they are not there yet; put the latest data in the image."""
        if self.fig is None:
            return
        if self._im is None:
            self._axes = self.fig.add_subplot()
            self._im = self._axes.imshow(np.ma.masked_invalid(self.data), **self.kwargs)
            self._im.norm.vmin, self._im.norm.vmax = 1, 1 + 1e-12  # nothing merged yet
            self._axes.set_title(self.title)
        if self._pending is None:
            return
        damage, self._pending = self._pending, None
        self._im.set_data(np.ma.masked_invalid(self.data))
        limits = color_limits(self.data, damage)
        if limits is not None:
            self._im.norm.vmin, self._im.norm.vmax = limits
        self._im.changed()


def _interactive() -> bool:
    """Whether matplotlib's back-end draws on screen by itself (Qt, Tk, ipympl...), not Agg or inline."""
    import matplotlib

    backend = matplotlib.get_backend().lower()
    return backend not in _NON_INTERACTIVE and "inline" not in backend


#: matplotlib's non-interactive back-ends (they render only when a figure is saved or shown inline)
_NON_INTERACTIVE = frozenset({"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"})
