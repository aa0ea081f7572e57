"""2x2 transformation matrices for ``(y, x)`` vectors (also at ``raytile.corrections.coordinates``, LiberTEM's path).

Scan rotation and detector flips act on shift vectors written ``(y, x)``
(y first, as arrays index them). The matrices compose right to left::

    transform = rotate_deg(scan_rotation) @ flip_y()   # flip first, then rotate
    y_new, x_new = transform @ (y, x)

A positive angle turns a vector clockwise on a display with y pointing down.
The functions return new ``numpy`` arrays; :func:`scale_rotate_flip_y` takes
a product of :func:`scale`, :func:`rotate` and :func:`flip_y` apart again.

>>> import numpy as np
>>> np.round(rotate_deg(90) @ (0.0, 1.0), 6).tolist()   # (dy, dx) = (0, 1) -> (1, 0)
[1.0, 0.0]
>>> (flip_y() @ (2, 3)).tolist()
[-2, 3]
"""

from __future__ import annotations

import numpy as np

__all__ = ["scale", "rotate", "rotate_deg", "flip_y", "flip_x", "identity", "scale_rotate_flip_y"]


def scale(factor: float) -> np.ndarray:
    """Scale both components by ``factor``."""
    return np.eye(2) * factor


def rotate(radians: float) -> np.ndarray:
    """Rotate ``(y, x)`` vectors by ``radians``: ``[[cos, sin], [-sin, cos]]``."""
    c, s = np.cos(radians), np.sin(radians)
    return np.array([[c, s], [-s, c]])


def rotate_deg(degrees: float) -> np.ndarray:
    """:func:`rotate` with the angle in degrees."""
    return rotate(np.deg2rad(degrees))


def flip_y() -> np.ndarray:
    """Negate the y component (a detector whose y axis points the other way)."""
    return np.array([[-1, 0], [0, 1]])


def flip_x() -> np.ndarray:
    """Negate the x component."""
    return np.array([[1, 0], [0, -1]])


def identity() -> np.ndarray:
    """Leave vectors as they are."""
    return np.eye(2)


def scale_rotate_flip_y(mat: np.ndarray) -> tuple[float, float, bool]:
    """``(scale, radians, flipped)`` such that ``scale(s) @ rotate(a) @ (flip_y() if flipped else identity())``
    equals ``mat``.

    Raises ``ValueError`` if ``mat`` is not of that form: its columns differ
    in length (different scales for y and x) or it shears.

    >>> s, a, f = scale_rotate_flip_y(scale(2.0) @ rotate_deg(30) @ flip_y())
    >>> round(float(s), 6), round(float(np.rad2deg(a)), 6), f
    (2.0, 30.0, True)
    """
    mat = np.asarray(mat, dtype=np.float64)
    scale_y, scale_x = np.linalg.norm(mat[:, 0]), np.linalg.norm(mat[:, 1])
    if not np.isclose(scale_y, scale_x):
        raise ValueError(f"y scale {scale_y} and x scale {scale_x} differ: not a uniform scale")
    unit = mat / scale_y
    det = float(np.linalg.det(unit))
    if not np.isclose(abs(det), 1.0):
        raise ValueError(f"the matrix shears: determinant {det} of the unscaled matrix is not +-1")
    flipped = det < 0
    rot = unit @ flip_y() if flipped else unit  # flip_y is its own inverse
    angle = np.arctan2(rot[0, 1], rot[0, 0])
    if not np.allclose(rotate(angle), rot):
        raise ValueError(f"{mat.tolist()} is no product of scale, rotation and flip_y")
    return float(scale_y), float(angle), bool(flipped)
