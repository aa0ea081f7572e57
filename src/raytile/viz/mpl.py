"""`MPLLive2DPlot`: a live plot drawn with matplotlib, redrawn at most twice a second (as LiberTEM's).

In Jupyter with the inline back-end the figure appears with the cell's
output, showing the final data; with ``%matplotlib widget`` (ipympl) or a
GUI back-end it updates while the run goes on.

Drawing never holds up the run: an update sets the image's data and colour
limits and, on an interactive back-end, asks for a redraw with
``draw_idle`` (done by the back-end's event loop). A non-interactive
back-end (Agg, Jupyter's inline) renders the figure when it is shown or
saved, with the latest data: drawing it after every update would only cost
time (~30 ms per figure) and be thrown away.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from raytile.viz.live import Live2DPlot, color_limits

__all__ = ["MPLLive2DPlot"]


class MPLLive2DPlot(Live2DPlot):
    """A matplotlib ``imshow`` of the channel; ``min_delta`` (default 0.5 s) between redraws; ``**kwargs``
    go to ``imshow``. ``fig``, ``axes``, ``im_obj`` are the figure, its axes and the image."""

    def __init__(self, dataset: Any, udf: Any, roi: Any = None, channel: Any = None, title: str | None = None,
                 min_delta: float = 0.5, udfresult: Any = None, **kwargs: Any):
        super().__init__(dataset=dataset, udf=udf, roi=roi, channel=channel, title=title, min_delta=min_delta,
                         udfresult=udfresult)
        self.kwargs = kwargs
        self.fig: Any = None
        self.axes: Any = None
        self.im_obj: Any = None

    def display(self) -> None:
        import matplotlib.pyplot as plt

        self.fig, self.axes = plt.subplots()
        self.im_obj = self.axes.imshow(np.ma.masked_invalid(self.data), **self.kwargs)
        self.im_obj.norm.vmin, self.im_obj.norm.vmax = 1, 1 + 1e-12  # nothing merged yet
        self.axes.set_title(self.title)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "FigureCanvasAgg is non-interactive" when headless
            self.fig.show()
        self.shown()

    def update(self, damage: Any, force: bool = False) -> None:
        if self.im_obj is None:
            warnings.warn("Plot is not displayed, not plotting. Call display() to display the plot.")
            return
        self.im_obj.set_data(np.ma.masked_invalid(self.data))
        limits = color_limits(self.data, damage)
        if limits is not None:
            self.im_obj.norm.vmin, self.im_obj.norm.vmax = limits
        self.im_obj.changed()
        if _interactive():
            self.fig.canvas.draw_idle()
            self.fig.canvas.flush_events()


def _interactive() -> bool:
    """Whether matplotlib's back-end draws on screen by itself (Qt, Tk, ipympl...), not Agg or inline."""
    import matplotlib

    backend = matplotlib.get_backend().lower()
    return backend not in _NON_INTERACTIVE and "inline" not in backend


#: matplotlib's non-interactive back-ends (they render only when a figure is saved or shown inline)
_NON_INTERACTIVE = frozenset({"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"})
