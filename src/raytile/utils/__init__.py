"""Vector and lattice helpers at LiberTEM's ``libertem.utils`` path.

Cartesian vectors are ``(y, x)`` on the last axis, polar ones ``(r, phi)``
with ``phi = arctan2(y, x)``. Rotations are clockwise in pixel coordinates
(y down), as LiberTEM's. Lattice points are ``zero + i*a + j*b`` for index
pairs ``(i, j)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.masks import make_polar

__all__ = [
    "make_cartesian", "make_polar", "rotate_precalc", "rotate_deg", "rotate_rad",
    "regularize_indices", "frame_peaks", "calc_coords", "within_frame",
]


def make_cartesian(polar: Any) -> np.ndarray:
    """Polar ``(r, phi)`` vectors (last axis) as cartesian ``(y, x)``."""
    p = np.asarray(polar)
    r, phi = p[..., 0], p[..., 1]
    return np.stack([r * np.sin(phi), r * np.cos(phi)], axis=-1)


def rotate_precalc(y: Any, x: Any, cos_angle: Any, sin_angle: Any) -> tuple[Any, Any]:
    """``(y, x)`` rotated by the angle whose cosine and sine are given (for loops that reuse them)."""
    return sin_angle * x + cos_angle * y, cos_angle * x - sin_angle * y


def rotate_rad(y: Any, x: Any, radians: Any) -> tuple[Any, Any]:
    """``(y, x)`` rotated by ``radians`` (clockwise in pixel coordinates)."""
    return rotate_precalc(y, x, np.cos(radians), np.sin(radians))


def rotate_deg(y: Any, x: Any, degrees: Any) -> tuple[Any, Any]:
    """``(y, x)`` rotated by ``degrees`` (clockwise in pixel coordinates)."""
    return rotate_rad(y, x, np.deg2rad(degrees))


def regularize_indices(indices: np.ndarray) -> np.ndarray:
    """Index pairs as an ``(n, 2)`` array, from ``(n, 2)`` or from ``np.mgrid``'s ``(2, h, w)``."""
    shape = indices.shape
    if len(shape) == 3 and shape[0] == 2:
        return np.concatenate(indices.T)
    if len(shape) == 2 and shape[1] == 2:
        return indices
    raise ValueError(f"indices: shape {shape}, expected (n, 2) or (2, n, m)")


def calc_coords(zero: Any, a: Any, b: Any, indices: Any) -> np.ndarray:
    """Lattice points ``zero + i*a + j*b`` for each index pair ``(i, j)``."""
    return np.asarray(zero) + np.asarray(indices) @ np.array((a, b))


def within_frame(peaks: np.ndarray, r: float, fy: int, fx: int) -> np.ndarray:
    """Which peaks lie at least ``r`` inside a ``(fy, fx)`` frame: a boolean per peak."""
    p = np.asarray(peaks)
    return np.all((p >= (r, r)) & (p < (fy - r, fx - r)), axis=-1)


def frame_peaks(fy: int, fx: int, zero: Any, a: Any, b: Any, r: float,
                indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index pairs and lattice points that lie at least ``r`` inside a ``(fy, fx)`` frame."""
    idx = regularize_indices(indices)
    peaks = calc_coords(zero, a, b, idx)
    inside = within_frame(peaks, r, fy, fx)
    return idx[inside], peaks[inside]
