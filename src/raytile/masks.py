"""Mask and template helpers at the path of ``libertem.masks``.

The argument order and conventions are LiberTEM's: centres and sizes are
given x first (``centerX, centerY, imageSizeX, imageSizeY``), the result is
shaped ``(imageSizeY, imageSizeX)``, and distances are measured between
pixel indices (pixel ``[y, x]`` lies at ``(y, x)``). The simpler helpers in
:mod:`raytile.udf.masks` (``disk``, ``ring``, ``point``, y first) are built
on these.

>>> from raytile import masks
>>> m = masks.circular(centerX=4, centerY=3, imageSizeX=9, imageSizeY=7, radius=2)
>>> m.shape, m.dtype, int(m.sum())
((7, 9), dtype('bool'), 13)
>>> r = masks.ring(4, 3, 9, 7, radius=2, radius_inner=1)
>>> int(r.sum()), bool(r[3, 4])
(8, False)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence, Union

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import sparse

# LiberTEM re-exports these from its masks module; ported code imports them from here
from raytile.common.sparse import is_sparse, to_dense, to_sparse

__all__ = [
    "MaskArrayType", "MaskFactoriesType", "circular", "ring", "rectangular", "radial_gradient",
    "radial_gradient_background_subtraction", "make_polar", "polar_map", "balance", "bounding_radius", "radial_bins",
    "background_subtraction", "sparse_template_multi_stack", "sparse_circular_multi_stack", "gradient_x",
    "gradient_y", "to_dense", "to_sparse", "is_sparse",
]

#: What a mask factory may return.
MaskArrayType = Union[np.ndarray, sp.coo_matrix, sp.dok_matrix]
#: One factory, or several, as ``ApplyMasksUDF`` and ``MaskContainer`` take them.
MaskFactoriesType = Union[Callable[[], MaskArrayType], Iterable[Callable[[], MaskArrayType]]]


def _offsets(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int) -> tuple[np.ndarray, np.ndarray]:
    """Open grids of ``y - centerY`` (a column) and ``x - centerX`` (a row)."""
    dy = (np.arange(int(imageSizeY)) - centerY).reshape(-1, 1)
    dx = (np.arange(int(imageSizeX)) - centerX).reshape(1, -1)
    return dy, dx


def _make_circular_mask(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float,
                        antialiased: bool = False) -> np.ndarray:
    """A disk: bool, True where the distance to the centre is at most ``radius``.

    With ``antialiased=True`` the edge is a linear ramp one pixel wide and
    the result is float64 (a one-bin :func:`radial_bins`).

    >>> _make_circular_mask(2, 2, 5, 5, 1).astype(int)
    array([[0, 0, 0, 0, 0],
           [0, 0, 1, 0, 0],
           [0, 1, 1, 1, 0],
           [0, 0, 1, 0, 0],
           [0, 0, 0, 0, 0]])
    """
    if antialiased:
        return radial_bins(centerX, centerY, imageSizeX, imageSizeY, radius, n_bins=1, use_sparse=False)[0]
    dy, dx = _offsets(centerX, centerY, imageSizeX, imageSizeY)
    return dy * dy + dx * dx <= radius * radius


def circular(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float,
             antialiased: bool = False) -> np.ndarray:
    """A disk mask shaped ``(imageSizeY, imageSizeX)``; see :func:`_make_circular_mask`."""
    return _make_circular_mask(centerX, centerY, imageSizeX, imageSizeY, radius, antialiased)


def ring(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float, radius_inner: float,
         antialiased: bool = False) -> np.ndarray:
    """A ring: True where ``radius_inner < distance <= radius`` (bool; float64 if antialiased).

    >>> ring(2, 2, 5, 5, radius=1, radius_inner=0).astype(int)[1:4, 1:4]
    array([[0, 1, 0],
           [1, 0, 1],
           [0, 1, 0]])
    """
    if antialiased:
        return radial_bins(centerX, centerY, imageSizeX, imageSizeY, radius=radius, radius_inner=radius_inner,
                           n_bins=1, use_sparse=False)[0]
    outer = _make_circular_mask(centerX, centerY, imageSizeX, imageSizeY, radius)
    inner = _make_circular_mask(centerX, centerY, imageSizeX, imageSizeY, radius_inner)
    return outer & ~inner


def rectangular(X: float, Y: float, Width: float, Height: float, imageSizeX: int, imageSizeY: int) -> np.ndarray:
    """A bool rectangle from corner ``(X, Y)`` spanning ``Width`` x ``Height`` (either may be negative).

    As in LiberTEM both corners are included, so the rectangle covers
    ``|Width| + 1`` columns and ``|Height| + 1`` rows before clipping to the
    image; a zero ``Width`` or ``Height`` gives an empty mask.

    >>> rectangular(1, 1, 2, -1, 5, 4).astype(int)
    array([[0, 1, 1, 1, 0],
           [0, 1, 1, 1, 0],
           [0, 0, 0, 0, 0],
           [0, 0, 0, 0, 0]])
    """
    mask = np.zeros((int(imageSizeY), int(imageSizeX)), dtype=bool)
    if Width == 0 or Height == 0:
        return mask
    ymin, ymax = int(min(Y, Y + Height)), int(max(Y, Y + Height))
    xmin, xmax = int(min(X, X + Width)), int(max(X, X + Width))
    mask[max(0, ymin):min(ymax + 1, int(imageSizeY)), max(0, xmin):min(xmax + 1, int(imageSizeX))] = True
    return mask


def radial_gradient(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float,
                    antialiased: bool = False) -> np.ndarray:
    """``distance / radius`` inside the disk of ``radius``, 0 outside (antialiased: a soft edge).

    >>> radial_gradient(2, 0, 5, 1, radius=2)
    array([[1. , 0.5, 0. , 0.5, 1. ]])
    """
    dy, dx = _offsets(centerX, centerY, imageSizeX, imageSizeY)
    d2 = dy * dy + dx * dx
    if antialiased:
        return radial_gradient_background_subtraction(r=np.sqrt(d2), r0=radius, r_outer=0)
    return (d2 <= radius * radius) * (np.sqrt(d2) / radius)


def radial_gradient_background_subtraction(r: np.ndarray, r0: float, r_outer: float,
                                           delta: float = 1) -> np.ndarray:
    """A template over a radius map ``r``: ``r / r0`` inside ``r0 - delta/2``, a linear
    transition to 0 (and below) up to ``r0 + delta/2``, and -1 out to ``r_outer``.

    ``r`` may be any radius map, e.g. an elliptical one from :func:`polar_map`.

    >>> radial_gradient_background_subtraction(np.array([0., 1., 2., 3., 4.]), r0=2, r_outer=3)
    array([ 0. ,  0.5,  0. , -1. ,  0. ])
    """
    result = np.zeros_like(r)
    inside = r < r0 - delta / 2
    result[inside] = r[inside] / r0
    transition = (r >= r0 - delta / 2) & (r < r0 + delta / 2)
    result[transition] = (r0 - r[transition]) / (delta / 2)
    outside = (r >= r0 + delta / 2) & (r <= r_outer)
    result[outside] = -1
    return result


def make_polar(cartesian: npt.ArrayLike) -> np.ndarray:
    """Cartesian ``(y, x)`` vectors (last axis) as polar ``(r, phi)``, ``phi = arctan2(y, x)``.

    LiberTEM keeps it in ``libertem.utils`` and imports it into ``libertem.masks``.

    >>> make_polar(np.array([[0.0, 2.0], [3.0, 0.0]])).round(6).tolist()
    [[2.0, 0.0], [3.0, 1.570796]]
    """
    vectors = np.asarray(cartesian)
    return np.stack([np.hypot(vectors[..., 0], vectors[..., 1]),
                     np.arctan2(vectors[..., 0], vectors[..., 1])], axis=-1)


def polar_map(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, stretchY: float = 1.,
              angle: float = 0.) -> tuple[np.ndarray, np.ndarray]:
    """Radius and angle (``arctan2(dy, dx)``) of every pixel, each ``(imageSizeY, imageSizeX)``.

    ``stretchY`` and ``angle`` (radians; 0 is the y direction) stretch the
    coordinate system elliptically before the radius is taken.

    >>> r, phi = polar_map(1, 1, 3, 3)
    >>> float(r[0, 1]), float(phi[1, 2])
    (1.0, 0.0)
    """
    y, x = np.mgrid[0:int(imageSizeY), 0:int(imageSizeX)]
    dy = y - centerY
    dx = x - centerX
    if stretchY != 1.0 or angle != 0.:
        dy, dx = ((dy * np.cos(angle) - dx * np.sin(angle)) / stretchY, dx * np.cos(angle) + dy * np.sin(angle))
    polar = make_polar(np.stack([dy, dx], axis=-1).astype(np.float64, copy=False))
    return polar[..., 0], polar[..., 1]


def balance(template: np.ndarray) -> np.ndarray:
    """Scale the negative part of ``template`` so that the whole sums to zero.

    >>> balance(np.array([1., 1., -1.]))
    array([ 1.,  1., -2.])
    """
    result = template.copy()
    above = template > 0
    below = template < 0
    result[below] *= template[above].sum() / template[below].sum() * -1
    return result


def bounding_radius(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int) -> int:
    """A radius around the centre that covers the whole frame.

    >>> bounding_radius(0, 0, 3, 4)
    6
    """
    dy = max(centerY, imageSizeY - centerY)
    dx = max(centerX, imageSizeX - centerX)
    return int(np.ceil(np.sqrt(dy ** 2 + dx ** 2))) + 1


def radial_bins(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float | None = None,
                radius_inner: float = 0, n_bins: int | None = None, normalize: bool = False,
                use_sparse: bool | None = None, dtype: npt.DTypeLike | None = None) -> Any:
    """``n_bins`` antialiased rings between ``radius_inner`` and ``radius``, stacked on axis 0.

    Neighbouring bins overlap by a linear ramp so that, with ``radius_inner=0``
    and ``radius`` covering the frame, the bins sum to exactly 1 on every pixel.
    ``normalize`` scales each bin to sum 1. ``use_sparse=None`` chooses a
    ``sparse.COO`` stack when a bin covers less than a tenth of the frame.

    >>> bins = radial_bins(5, 5, 11, 11, n_bins=3, use_sparse=False)
    >>> bins.shape, bool(np.allclose(bins.sum(axis=0), 1))
    ((3, 11, 11), True)
    """
    if radius is None:
        radius = bounding_radius(centerX, centerY, imageSizeX, imageSizeY)
    if n_bins is None:
        n_bins = int(np.round(radius - radius_inner))
    h, w = int(imageSizeY), int(imageSizeX)
    r = polar_map(centerX, centerY, imageSizeX, imageSizeY)[0].reshape(-1)
    width = (radius - radius_inner) / n_bins
    bin_area = np.pi * (radius ** 2 - (radius - width) ** 2)
    if use_sparse is None:
        use_sparse = bool(bin_area / (w * h) < 0.1)
    pixel_index = np.arange(len(r), dtype=np.int64)

    bins: list[Any] = []
    for r0 in np.linspace(radius_inner, radius - width, n_bins) + width / 2:
        # the "+ 0.5" makes neighbouring bins overlap so that they sum up to exactly 1
        vals = np.maximum(0, np.minimum(1, width / 2 + 0.5 - np.abs(r - r0)))
        if use_sparse:
            select = vals != 0
            vals = vals[select]
        if normalize:
            total = vals.sum()
            if not np.isclose(total, 0):
                vals /= total
        if use_sparse:
            bins.append(sparse.COO(coords=pixel_index[select], data=vals.astype(dtype), shape=(len(r),)))
        else:
            bins.append(vals.reshape((h, w)).astype(dtype))
    # the innermost bin misses the centre pixel itself (a singularity): set it
    if radius_inner < 0.5:
        yy, xx = int(np.round(centerY)), int(np.round(centerX))
        if 0 <= yy < h and 0 <= xx < w:
            if use_sparse:
                index = yy * w + xx
                diff = 1 - bins[0][index] - radius_inner
                bins[0] = bins[0] + sparse.COO(coords=np.array([index]), data=np.array([diff]), shape=(len(r),))
            else:
                bins[0][yy, xx] = 1 - radius_inner
    if use_sparse:
        return sparse.stack(bins).reshape((-1, h, w))
    return np.stack(bins)


def background_subtraction(centerX: float, centerY: float, imageSizeX: int, imageSizeY: int, radius: float,
                           radius_inner: float, antialiased: bool = False) -> np.ndarray:
    """A disk of ``radius_inner`` minus the ring out to ``radius``, scaled to sum to zero.

    >>> bool(np.isclose(background_subtraction(10, 10, 20, 20, 5, 3).sum(), 0))
    True
    """
    disk = circular(centerX, centerY, imageSizeX, imageSizeY, radius_inner, antialiased=antialiased)
    annulus = ring(centerX, centerY, imageSizeX, imageSizeY, radius, radius_inner, antialiased=antialiased)
    return disk - annulus * np.sum(disk) / np.sum(annulus)


def sparse_template_multi_stack(mask_index: Sequence[int], offsetX: npt.ArrayLike, offsetY: npt.ArrayLike,
                                template: np.ndarray, imageSizeX: int, imageSizeY: int) -> sparse.COO:
    """Stamp ``template`` into layer ``mask_index[i]`` at ``(offsetY[i], offsetX[i])``.

    Returns a ``sparse.COO`` stack ``(max(mask_index) + 1, imageSizeY,
    imageSizeX)``; parts of a template outside the image are dropped.

    >>> s = sparse_template_multi_stack([0, 1], [0, 3], [0, -1], np.ones((2, 2)), 4, 3)
    >>> s.todense().astype(int)[1]
    array([[0, 0, 0, 1],
           [0, 0, 0, 0],
           [0, 0, 0, 0]])
    """
    fy, fx = template.shape
    ty, tx = np.mgrid[0:fy, 0:fx]
    n = len(mask_index)
    layer = np.repeat(np.asarray(mask_index, dtype=int), fy * fx)
    ys = (ty.reshape(1, -1) + np.asarray(offsetY, dtype=int).reshape(-1, 1)).reshape(-1)
    xs = (tx.reshape(1, -1) + np.asarray(offsetX, dtype=int).reshape(-1, 1)).reshape(-1)
    data = np.tile(template.reshape(-1), n)
    keep = (ys >= 0) & (ys < imageSizeY) & (xs >= 0) & (xs < imageSizeX)
    return sparse.COO(
        coords=np.stack((layer[keep], ys[keep], xs[keep])),
        data=data[keep],
        shape=(int(max(mask_index)) + 1, int(imageSizeY), int(imageSizeX)),
    )


def sparse_circular_multi_stack(mask_index: Sequence[int], centerX: npt.ArrayLike, centerY: npt.ArrayLike,
                                imageSizeX: int, imageSizeY: int, radius: float) -> sparse.COO:
    """Disks of ``radius`` at integer centres, one per entry, as a ``sparse.COO`` stack.

    >>> s = sparse_circular_multi_stack([0, 1], [1, 3], [1, 3], 5, 5, 1)
    >>> s.shape, int(s.sum())
    ((2, 5, 5), 10)
    """
    bbox = int(2 * np.ceil(radius) + 1)  # odd, so the template has a centre pixel
    centre = (bbox - 1) // 2
    template = circular(centerX=centre, centerY=centre, imageSizeX=bbox, imageSizeY=bbox, radius=radius)
    return sparse_template_multi_stack(
        mask_index=mask_index,
        offsetX=np.asarray(centerX, dtype=int) - centre,
        offsetY=np.asarray(centerY, dtype=int) - centre,
        template=template,
        imageSizeX=imageSizeX,
        imageSizeY=imageSizeY,
    )


def gradient_x(imageSizeX: int, imageSizeY: int, dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """Every pixel's x index, shaped ``(imageSizeY, imageSizeX)``.

    >>> gradient_x(3, 2)
    array([[0., 1., 2.],
           [0., 1., 2.]], dtype=float32)
    """
    return np.tile(np.arange(int(imageSizeX)).astype(dtype), (int(imageSizeY), 1))


def gradient_y(imageSizeX: int, imageSizeY: int, dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """Every pixel's y index, shaped ``(imageSizeY, imageSizeX)``."""
    return gradient_x(imageSizeY, imageSizeX, dtype).T
