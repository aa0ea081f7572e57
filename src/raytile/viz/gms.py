"""``libertem.viz.gms`` at its ported path: :class:`GMSLive2DPlot`, a live plot in Gatan Microscopy
Suite (Digital Micrograph), for scripts run inside GMS's Python.

It draws through GMS's ``DigitalMicrograph`` module, imported when a plot is
made (it exists only inside GMS)::

    ctx.plot_class = GMSLive2DPlot
    ctx.run_udf(dataset=ds, udf=SumUDF(), plots=True)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from raytile.viz.live import Live2DPlot, color_limits

__all__ = ["GMSLive2DPlot"]


class GMSLive2DPlot(Live2DPlot):
    """A GMS image of the channel (as LiberTEM's, experimental); ``min_delta`` (default 0.2 s) between
    redraws. ``image`` is the GMS image, ``window`` and ``disp`` its window and display (None before
    :meth:`display`)."""

    def __init__(self, dataset: Any, udf: Any, roi: Any = None, channel: Any = None, title: str | None = None,
                 min_delta: float = 0.2, udfresult: Any = None):
        super().__init__(dataset=dataset, udf=udf, roi=roi, channel=channel, title=title, min_delta=min_delta,
                         udfresult=udfresult)
        import DigitalMicrograph as DM  # only inside GMS

        self.image = DM.CreateImage(np.array(self.data))
        self.window: Any = None
        self.disp: Any = None
        self.image.SetName(self.title)

    def display(self) -> None:
        """Show the image in a GMS window (``ShowImage``), with fixed contrast limits set by each update."""
        self.window = self.image.ShowImage()
        self.disp = self.image.GetImageDisplay(0)
        self.disp.SetDoAutoSurvey(False)
        self.shown()

    def update(self, damage: Any, force: bool = False) -> None:
        if self.disp is None:
            warnings.warn("Plot is not displayed, not plotting. Call display() to display the plot.")
            return
        limits = color_limits(self.data, damage)
        if limits is not None:
            self.disp.SetContrastLimits(float(limits[0]), float(limits[1]))
        buffer = self.image.GetNumArray()
        buffer[:] = self.data
        self.image.UpdateImage()
