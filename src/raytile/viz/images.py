"""Results as RGB(A) images: what ``AnalysisResult.visualized`` holds.

:func:`visualize_simple` maps a 2D array to RGBA bytes through a matplotlib
colour map (``gist_earth`` as LiberTEM) on a linear or logarithmic, outlier-
robust scale (:func:`~raytile.viz.scale.robust_limits`), considering only the
positions in ``damage`` (merged, inside the ROI). :func:`rgb_from_2dvector`
shows a vector field in LiberTEM's colours (:mod:`raytile.viz.colourwheel`).

>>> import numpy as np
>>> visualize_simple(np.arange(6.0).reshape(2, 3)).shape
(2, 3, 4)
>>> rgb_from_2dvector(y=np.zeros((2, 2)), x=np.ones((2, 2))).shape
(2, 2, 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.viz.colourwheel import rgb_from_2dvector
from raytile.viz.scale import robust_limits, valid_values

__all__ = ["visualize_simple", "rgb_from_2dvector", "DEFAULT_COLORMAP"]

#: The colour map of :func:`visualize_simple` when none is given (LiberTEM's choice).
DEFAULT_COLORMAP = "gist_earth"


def visualize_simple(result: Any, colormap: Any = None, logarithmic: bool = False, vmin: float | None = None,
                     vmax: float | None = None, damage: Any = None) -> np.ndarray:
    """``result`` (2D) as RGBA ``uint8`` ``(Y, X, 4)``.

    ``damage``: a bool map (or True) of the positions that count for the
    scale; None counts the non-zero ones. ``logarithmic`` shifts the data to
    start at 1 and uses a log scale. NaN positions (outside a ROI) come out
    in the colour map's "bad" colour.
    """
    from matplotlib import colormaps, colors

    data = np.asarray(result)
    if data.dtype.kind == "c":
        data = np.abs(data)
    data = data.astype(np.float64)
    if logarithmic:
        finite = data[np.isfinite(data)]
        data = data - (finite.min() if finite.size else 0.0) + 1
    if vmin is None or vmax is None:
        valid = (data != 0) if damage is None else damage
        qmin, qmax = robust_limits(valid_values(data, valid)) if np.any(valid) else (1.0, 1.0)
        vmin = qmin if vmin is None else vmin
        vmax = qmax if vmax is None else vmax
    norm_cls = colors.LogNorm if logarithmic else colors.Normalize
    if logarithmic:
        vmin = max(vmin, 1e-12)
        vmax = max(vmax, vmin)
    norm = norm_cls(vmin=vmin, vmax=vmax)
    cmap = colormaps[DEFAULT_COLORMAP if colormap is None else colormap] \
        if colormap is None or isinstance(colormap, str) else colormap
    with np.errstate(invalid="ignore", divide="ignore"):
        normalized = norm(data.reshape(-1)).reshape(data.shape)
    return np.asarray(cmap(normalized, bytes=True))
