"""An outlier-robust colour scale: limits from quantiles, so that a few hot pixels do not flatten an image.

DECTRIS detectors mark dead and hot pixels with the dtype's maximum value
(LiberTEM #1310): with a plain min/max scale one such pixel turns the whole
image black. :func:`robust_limits` takes the 0.1 % and 99.9 % quantiles of
the valid, non-zero values and uses them instead of the extremes when an
extreme lies far outside them (more than ``snip_factor`` times their size).

>>> import numpy as np
>>> data = np.arange(1, 10001, dtype=np.uint32) % 50
>>> data[17] = 2**32 - 1                             # one dead pixel, as DECTRIS marks it
>>> robust_limits(data)
(0.0, 49.0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["robust_limits", "valid_values"]


def valid_values(data: Any, valid: Any = None) -> np.ndarray:
    """The finite entries of ``data`` (as float64), restricted to ``valid`` (a bool mask or True/None)."""
    arr = np.asarray(data)
    if arr.dtype.kind == "c":
        arr = np.abs(arr)
    arr = arr.astype(np.float64, copy=False)
    keep = np.isfinite(arr)
    if valid is not None and valid is not True:
        keep &= np.broadcast_to(np.asarray(valid, dtype=bool), arr.shape)
    return arr[keep]


def robust_limits(data: Any, quantile: float = 0.001, snip_factor: float = 10.0) -> tuple[float, float]:
    """``(vmin, vmax)`` of the finite values of ``data``, outliers left out.

    ``quantile`` is the fraction ignored at each end; an extreme is replaced
    by the quantile-filtered extreme only when it lies more than
    ``snip_factor`` times that value away (so ordinary data keep their exact
    range). Zeros are left out of the quantiles (sparse data) but kept in the
    range. Empty or constant data give a small non-empty range.
    """
    values = valid_values(data)
    if values.size == 0:
        return 1.0, math.nextafter(1.0, math.inf)
    vmin, vmax = float(values.min()), float(values.max())
    nonzero = values[values != 0]
    if nonzero.size:
        lower, upper = np.quantile(nonzero, (quantile, 1 - quantile))
        if nonzero.size < values.size:
            lower, upper = min(lower, 0.0), max(upper, 0.0)
        inside = values[(values >= lower) & (values <= upper)]
        if inside.size:
            fmin, fmax = float(inside.min()), float(inside.max())
            if fmin != 0 and abs(fmin - vmin) / abs(fmin) > snip_factor:
                vmin = fmin
            if fmax != 0 and abs(fmax - vmax) / abs(fmax) > snip_factor:
                vmax = fmax
    if vmin == vmax:
        vmax = math.nextafter(vmin, math.inf)
    return vmin, vmax
