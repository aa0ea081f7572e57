"""Visualisation: result images for the Analysis API and live plots of running UDFs.

``libertem_cyclic`` (LiberTEM's colour map of directions) is made when first
read: it needs colorcet and matplotlib, which ``import raytile.viz`` does not load.

>>> from raytile.viz import visualize_simple, robust_limits
"""

from typing import Any

from raytile.viz.images import rgb_from_2dvector, visualize_simple
from raytile.viz.scale import robust_limits

__all__ = ["visualize_simple", "rgb_from_2dvector", "robust_limits", "libertem_cyclic"]


def __getattr__(name: str) -> Any:
    if name == "libertem_cyclic":
        from raytile.viz.colourwheel import cyclic_colormap

        return cyclic_colormap()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
