"""Visualisation: result images for the Analysis API and live plots of running UDFs.

>>> from raytile.viz import visualize_simple, robust_limits
"""

from raytile.viz.images import rgb_from_2dvector, visualize_simple
from raytile.viz.scale import robust_limits

__all__ = ["visualize_simple", "rgb_from_2dvector", "robust_limits"]
