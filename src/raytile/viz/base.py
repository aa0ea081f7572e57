"""``libertem.viz.base`` at its ported path: live plots and result images.

``Live2DPlot`` is the base of live plots (``run_udf(..., plots=[...])``),
``Dummy2DPlot`` one that draws nothing (for tests and scripts without a display).
"""

from raytile.viz.images import rgb_from_2dvector, visualize_simple
from raytile.viz.live import Dummy2DPlot, Live2DPlot, get_plottable_2D_channels

__all__ = ["Live2DPlot", "Dummy2DPlot", "get_plottable_2D_channels", "visualize_simple", "rgb_from_2dvector"]
