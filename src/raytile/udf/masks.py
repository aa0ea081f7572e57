"""Mask helpers for :class:`~raytile.udf.applymasks.ApplyMasksUDF` and friends.

Each returns a ``float32`` array of ``shape`` (y, x) with 1 inside and 0
outside. Distances are measured from pixel centres at integer coordinates.
They are the y-first, float32 face of :mod:`raytile.masks` (LiberTEM's
``libertem.masks`` helpers, x first), which computes them.

>>> from raytile.udf import masks
>>> m = masks.ring(cy=8, cx=8, ri=2, ro=5, shape=(16, 16))
>>> m.dtype, m.shape
(dtype('float32'), (16, 16))
"""

from __future__ import annotations

import numpy as np

from raytile import masks as _lt
# where LiberTEM keeps them: libertem.udf.masks
from raytile.udf.applymasks import ApplyMasksUDF
from raytile.udf.maskengine import ApplyMasksEngine

__all__ = ["disk", "ring", "point", "ApplyMasksUDF", "ApplyMasksEngine"]


def _check_2d(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) != 2:
        raise ValueError(f"mask shape must be 2D (y, x), got {shape}")
    return int(shape[0]), int(shape[1])


def disk(cy: float, cx: float, r: float, shape: tuple[int, int]) -> np.ndarray:
    """1 where the distance to ``(cy, cx)`` is at most ``r``."""
    h, w = _check_2d(shape)
    return _lt.circular(cx, cy, w, h, r).astype(np.float32)


def ring(cy: float, cx: float, ri: float, ro: float, shape: tuple[int, int]) -> np.ndarray:
    """1 where ``ri < distance <= ro``: ``disk(ro) - disk(ri)``."""
    if ri > ro:
        raise ValueError(f"ring needs ri <= ro, got ri={ri}, ro={ro}")
    h, w = _check_2d(shape)
    return _lt.ring(cx, cy, w, h, radius=ro, radius_inner=ri).astype(np.float32)


def point(cy: float, cx: float, shape: tuple[int, int]) -> np.ndarray:
    """1 at the pixel nearest to ``(cy, cx)``; that pixel must lie inside ``shape``."""
    iy, ix = int(round(cy)), int(round(cx))
    if len(shape) != 2 or not (0 <= iy < shape[0] and 0 <= ix < shape[1]):
        raise ValueError(f"point ({cy}, {cx}) lies outside a mask of shape {shape}")
    out = np.zeros(shape, dtype=np.float32)
    out[iy, ix] = 1
    return out
