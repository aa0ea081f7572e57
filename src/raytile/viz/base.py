"""``libertem.viz.base`` at its ported path: live plots and result images.

``Live2DPlot`` is the base of live plots (``run_udf(..., plots=[...])``),
``Dummy2DPlot`` one that draws nothing (for tests and scripts without a display);
``libertem_cyclic`` is LiberTEM's colour map of directions (made when first read).
"""

from typing import Any

from raytile.viz.colourwheel import make_colormap
from raytile.viz.images import rgb_from_2dvector, visualize_simple
from raytile.viz.live import Dummy2DPlot, Live2DPlot, get_plottable_2D_channels

__all__ = ["Live2DPlot", "Dummy2DPlot", "get_plottable_2D_channels", "visualize_simple", "rgb_from_2dvector",
           "libertem_cyclic", "make_colormap"]


def __getattr__(name: str) -> Any:
    if name == "libertem_cyclic":
        from raytile.viz.colourwheel import cyclic_colormap

        return cyclic_colormap()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
