"""`BQLive2DPlot`: a live plot drawn with bqplot in Jupyter (ipywidgets), up to ~60 redraws a second.

The widget sends only the new image to the browser, so it can follow a run
far faster than matplotlib; LiberTEM-live's notebooks use it. Needs
``bqplot`` and ``ipywidgets`` (imported when the plot is made).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.viz.live import Live2DPlot, color_limits

__all__ = ["BQLive2DPlot"]


class BQLive2DPlot(Live2DPlot):
    """A bqplot ``HeatMap``-like image of the channel; ``min_delta`` (default 1/60 s) between redraws."""

    def __init__(self, dataset: Any, udf: Any, roi: Any = None, channel: Any = None, title: str | None = None,
                 min_delta: float = 1 / 60, udfresult: Any = None):
        super().__init__(dataset=dataset, udf=udf, roi=roi, channel=channel, title=title, min_delta=min_delta,
                         udfresult=udfresult)
        import bqplot
        import bqplot.pyplot as bplt

        if np.ndim(self.data) != 2:
            raise ValueError(f"{self.title}: BQLive2DPlot shows 2D data, got shape {np.shape(self.data)}")
        height, width = np.shape(self.data)
        self.figure = bplt.figure(title=self.title, padding_x=0, padding_y=0, min_aspect_ratio=width / height,
                                  max_aspect_ratio=width / height)
        self.scale = bqplot.ColorScale(min=0, max=1)
        self.image = bplt.heatmap(np.zeros((height, width)), scales={"color": self.scale},
                                  x=np.arange(width), y=np.arange(height)[::-1])

    def display(self) -> None:
        from IPython.display import display

        display(self.figure)
        self.shown()

    def update(self, damage: Any, force: bool = False) -> None:
        limits = color_limits(self.data, damage)
        if limits is not None:
            self.scale.min, self.scale.max = float(limits[0]), float(limits[1])
        self.image.color = np.nan_to_num(np.asarray(self.data, dtype=np.float64), nan=self.scale.min or 0.0)
