"""The centre-of-mass maths of :class:`~raytile.udf.com.CoMUDF`, without the UDF.

What turns a frame's moments into a field: the moment masks (:func:`moment_masks`,
:func:`com_masks_generic`), the shifts of the centres of mass
(:func:`center_shifts`), the scan rotation and flip (:func:`apply_correction`),
the regression subtracted from the field (:func:`fit_regression`), the field's
derivatives (:func:`divergence`, :func:`curl_2d`, :func:`magnitude`) and the
guess of the corrections from the curl (:func:`guess_corrections`).

Only the moments (intensity, y and x moment of every frame) depend on the
tiles and their device; what follows from them is nav-sized and computed here,
with numpy, on the host. So the UDF on numpy or CuPy tiles (a GPU port
computes only the moments on the device) and the Analysis API
(:mod:`raytile.analysis.com`) give the same results from the same moments, as
LiberTEM's ``libertem.udf.com`` does under the same names.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Callable, Literal, NamedTuple, Union

import numpy as np

from raytile import masks as _masks
from raytile.common import coordinates
from raytile.common.errors import UDFException, udf_exception_class

__all__ = [
    "RegressionOptions", "RegressionOptionsT", "correction_matrix", "apply_correction", "divergence", "curl_2d",
    "magnitude", "center_shifts", "coordinate_check", "GuessResult", "guess_corrections", "com_masks_generic",
    "com_masks_factory", "moment_masks", "regression_input", "fit_regression",
]


class RegressionOptions(IntEnum):
    """The ``regression`` choices of :class:`~raytile.udf.com.CoMUDF` (LiberTEM's values)."""

    NO_REGRESSION = -1
    SUBTRACT_MEAN = 0
    SUBTRACT_LINEAR = 1


#: A ``RegressionOptions`` value, -1/0/1, or a ``(3, 2)`` array ``[[y, x], [dy/dy, dx/dy], [dy/dx, dx/dx]]``.
RegressionOptionsT = Union[np.ndarray, Literal[-1, 0, 1], RegressionOptions]


def correction_matrix(scan_rotation: float, flip_y: bool) -> np.ndarray:
    """The 2x2 matrix acting on ``(y, x)`` shift vectors: rotation by ``scan_rotation`` degrees after the flip.

    A positive angle turns a vector clockwise in the usual image display (y
    down); ``flip_y`` negates y first. Built from :mod:`raytile.common.coordinates`.

    >>> np.round(correction_matrix(90, False) @ [0.0, 1.0], 6)  # (dy, dx) = (0, 1) -> (1, 0)
    array([1., 0.])
    """
    flip = coordinates.flip_y() if flip_y else coordinates.identity()
    return coordinates.rotate_deg(float(scan_rotation)) @ flip


def apply_correction(y_centers: np.ndarray, x_centers: np.ndarray, scan_rotation: float, flip_y: bool,
                     forward: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Rotate (and flip) shift components; ``forward=False`` undoes the correction.

    >>> y, x = apply_correction(np.array([0.0]), np.array([1.0]), 90, False)
    >>> np.round([y[0], x[0]], 6).tolist()
    [1.0, 0.0]
    """
    mat = correction_matrix(scan_rotation, flip_y)
    if not forward:
        mat = np.linalg.inv(mat)
    y, x = _float_or_complex(y_centers), _float_or_complex(x_centers)
    return mat[0, 0] * y + mat[0, 1] * x, mat[1, 0] * y + mat[1, 1] * x


def _float_or_complex(a: Any) -> np.ndarray:
    """``a`` as float64, or complex128 if it is complex: the imaginary part of complex shifts is kept."""
    arr = np.asarray(a)
    return arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64, copy=False)


def divergence(y_centers: np.ndarray, x_centers: np.ndarray) -> np.ndarray:
    """``d(field_y)/dy + d(field_x)/dx`` on a 2D nav grid (``np.gradient``, central differences)."""
    return np.gradient(y_centers, axis=0) + np.gradient(x_centers, axis=1)


def curl_2d(y_centers: np.ndarray, x_centers: np.ndarray) -> np.ndarray:
    """The 2D curl ``d(field_y)/dx - d(field_x)/dy`` on a 2D nav grid."""
    return np.gradient(y_centers, axis=1) - np.gradient(x_centers, axis=0)


def magnitude(y_centers: np.ndarray, x_centers: np.ndarray) -> np.ndarray:
    """The length of the ``(y, x)`` vectors."""
    return np.sqrt(np.asarray(y_centers) ** 2 + np.asarray(x_centers) ** 2)


def center_shifts(img_sum: np.ndarray, img_y: np.ndarray, img_x: np.ndarray, ref_y: float,
                  ref_x: float) -> tuple[np.ndarray, np.ndarray]:
    """``(y, x)`` shifts of the centres of mass ``img_y / img_sum``, ``img_x / img_sum`` from ``(ref_y, ref_x)``.

    Positions with ``img_sum == 0`` (no intensity to weigh) get a zero shift,
    as in LiberTEM; :class:`CoMUDF` uses this, so such a frame's centre of
    mass is ``(ref_y, ref_x)`` itself.

    >>> center_shifts(np.array([2.0, 0.0]), np.array([6.0, 0.0]), np.array([2.0, 0.0]), 1.0, 1.0)
    (array([2., 0.]), array([0., 0.]))
    """
    img_sum = np.asarray(img_sum, dtype=np.float64)
    has = img_sum != 0
    safe = np.where(has, img_sum, 1.0)
    y = np.where(has, np.asarray(img_y) / safe - ref_y, 0.0)
    x = np.where(has, np.asarray(img_x) / safe - ref_x, 0.0)
    return y, x


def _default_stats_roi(roi: Any) -> Any:
    # the last scan row and column carry artefacts of the one-sided differences
    return (slice(0, -1), slice(0, -1)) if roi is None else roi


def coordinate_check(y_centers: np.ndarray, x_centers: np.ndarray,
                     roi: np.ndarray | tuple[slice, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """RMS curl of the corrected field for every whole-degree ``scan_rotation`` 0..359: ``(straight, flipped)``.

    ``straight`` is for ``flip_y=False``, ``flipped`` for ``flip_y=True``. A
    purely electrostatic field has no curl, so the right correction minimises
    it. ``roi`` selects the positions (a bool array or a tuple of slices);
    by default all but the last row and column.

    >>> straight, flipped = coordinate_check(np.zeros((4, 4)), np.zeros((4, 4)))
    >>> straight.shape, float(flipped.max())
    ((360,), 0.0)
    """
    sel = _default_stats_roi(roi)
    y = np.asarray(y_centers, dtype=np.float64)
    x = np.asarray(x_centers, dtype=np.float64)
    angles = np.radians(np.arange(360))
    c, s = np.cos(angles), np.sin(angles)
    out = []
    for sign in (1.0, -1.0):  # straight, flipped
        fy = sign * y
        # curl(R(a) (fy, x)) = cos(a) * p + sin(a) * q, with p and q independent of the angle
        p = (np.gradient(fy, axis=1) - np.gradient(x, axis=0))[sel].reshape(-1)
        q = (np.gradient(x, axis=1) + np.gradient(fy, axis=0))[sel].reshape(-1)
        rms = np.empty(len(angles))
        for i in range(len(angles)):  # (the quadratic form in cos and sin would lose the zero to rounding)
            v = c[i] * p + s[i] * q
            rms[i] = np.sqrt(np.mean(v * v)) if v.size else 0.0
        out.append(rms)
    return out[0], out[1]


class GuessResult(NamedTuple):
    """What :func:`guess_corrections` infers; pass it as ``CoMUDF.with_params(**guess._asdict())``."""

    scan_rotation: int
    flip_y: bool
    cy: float
    cx: float


def guess_corrections(y_centers: np.ndarray, x_centers: np.ndarray,
                      roi: np.ndarray | tuple[slice, ...] | None = None) -> GuessResult:
    """Guess ``scan_rotation``, ``flip_y`` and the centre ``(cy, cx)`` from CoM data of atomic-resolution STEM.

    Assumes a purely electrostatic field (the right correction has the least
    RMS curl, see :func:`coordinate_check`), no net deflection over the field
    of view (the centre is the mean of the inputs), and that the beam is
    pulled towards the nuclei, so the divergence has its strong tail on the
    negative side (this picks between the two angles 180 degrees apart).
    Corrections already applied to the inputs are relative: the result adds
    to them. ``y_centers``/``x_centers`` are 2D (scan) arrays, e.g.
    ``res["raw_com"].data[..., 0]`` and ``[..., 1]``.

    >>> guess = guess_corrections(res["raw_com"].data[..., 0], res["raw_com"].data[..., 1])
    >>> udf = CoMUDF.with_params(**guess._asdict())
    """
    sel = _default_stats_roi(roi)
    y = np.asarray(y_centers, dtype=np.float64)
    x = np.asarray(x_centers, dtype=np.float64)
    straight, flipped = coordinate_check(y, x, roi=sel)
    flip_y = bool(flipped.min() < straight.min())
    angle = int(np.argmin(flipped if flip_y else straight))
    cy_, cx_ = apply_correction(y, x, scan_rotation=angle, flip_y=flip_y)
    div = divergence(cy_, cx_)[sel].reshape(-1)
    div = div[np.isfinite(div)]
    if div.size:
        extent = float(np.max(np.abs(div)))
        if extent > 0:
            counts, _ = np.histogram(div, bins=5, range=(-extent, extent))
            if counts[0] < counts[-1]:  # the strong tail is on the positive side: turned by 180 degrees
                angle += 180
    if angle > 180:
        angle -= 360
    return GuessResult(scan_rotation=int(angle), flip_y=flip_y, cy=float(np.mean(y[sel])),
                       cx=float(np.mean(x[sel])))


def com_masks_generic(detector_y: int, detector_x: int,
                      base_mask_factory: Callable[[], np.ndarray]) -> list[Callable[[], np.ndarray]]:
    """Three mask factories for a CoM by :class:`~raytile.udf.ApplyMasksUDF`: the selection, y and x weighted.

    >>> fs = com_masks_generic(4, 5, lambda: np.ones((4, 5)))
    >>> [f().shape for f in fs], float(fs[1]()[3, 0])
    ([(4, 5), (4, 5), (4, 5)], 3.0)
    """
    def y_weighted() -> np.ndarray:
        return _masks.gradient_y(imageSizeX=detector_x, imageSizeY=detector_y) * base_mask_factory()

    def x_weighted() -> np.ndarray:
        return _masks.gradient_x(imageSizeX=detector_x, imageSizeY=detector_y) * base_mask_factory()

    return [base_mask_factory, y_weighted, x_weighted]


def com_masks_factory(detector_y: int, detector_x: int, cy: float, cx: float,
                      r: float) -> list[Callable[[], np.ndarray]]:
    """:func:`com_masks_generic` for a disk of radius ``r`` around ``(cy, cx)``."""
    def disk() -> np.ndarray:
        return _masks.circular(centerX=cx, centerY=cy, imageSizeX=detector_x, imageSizeY=detector_y, radius=r)

    return com_masks_generic(detector_y, detector_x, disk)


def moment_masks(sig: tuple[int, ...], cy: float, cx: float, r: float, ri: float | None) -> np.ndarray:
    """``(3, *sig)`` float64: the region around ``(cy, cx)``, and the region weighted by y and by x.

    A frame times these gives its intensity and its y and x moments
    (:class:`CoMUDF`). The region is LiberTEM's: the disk ``d <= r`` if
    ``ri`` is ``None`` or close to 0 (``np.isclose``), else the ring
    ``ri < d <= r`` (:func:`raytile.masks.ring`; a pixel at exactly ``ri``
    is left out), with distances compared squared as LiberTEM's masks do.

    >>> moment_masks((3, 3), 1.0, 1.0, 1.0, 0.0)[2].tolist()
    [[0.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 1.0, 0.0]]
    >>> moment_masks((3, 3), 1.0, 1.0, 1.0, 0.5)[0].tolist()  # the centre is inside ri
    [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    h, w = int(sig[0]), int(sig[1])
    if ri is None or np.isclose(ri, 0.0):
        region = _masks.circular(centerX=cx, centerY=cy, imageSizeX=w, imageSizeY=h, radius=r)
    else:
        region = _masks.ring(centerX=cx, centerY=cy, imageSizeX=w, imageSizeY=h, radius=r, radius_inner=ri)
    stack = np.empty((3, h, w))
    stack[0] = region
    # the coordinates broadcast (an mgrid of float64 took 1.3 ms of the 2 ms for 256x256, once per run and worker)
    np.multiply(stack[0], np.arange(h, dtype=np.float64)[:, None], out=stack[1])
    np.multiply(stack[0], np.arange(w, dtype=np.float64)[None, :], out=stack[2])
    return stack


def regression_input(coords: np.ndarray, nav_shape: tuple[int, ...]) -> np.ndarray:
    """``[1, y, x]`` per position (``coords``: ``(positions, 2)`` nav coordinates) for a linear regression over
    a 2D scan; UDFException naming ``nav_shape`` for another scan."""
    if coords.shape[1] != 2:
        raise UDFException(f"CoMUDF: a linear regression needs a 2D scan, got nav shape {nav_shape}")
    return np.concatenate([np.ones((coords.shape[0], 1)), coords.astype(np.float64)], axis=1)


def fit_regression(regression: RegressionOptionsT, field: np.ndarray, usable: np.ndarray, coords: np.ndarray,
                   nav_shape: tuple[int, ...]) -> np.ndarray:
    """The ``(3, 2)`` regression to subtract from ``field`` (``(positions, 2)`` at nav ``coords``), fitted on
    ``field[usable]`` as LiberTEM fits over its valid nav mask.

    ``regression``: a :class:`RegressionOptions` value (none: zeros; the mean;
    a linear fit over the scan) or a ``(3, 2)`` array, returned as it is.
    A ValueError (also a UDFException) for anything else.
    """
    result = np.zeros((3, 2))
    if isinstance(regression, (int, np.integer)) and not isinstance(regression, bool):
        option = int(regression)
        if option == RegressionOptions.NO_REGRESSION:
            return result
        if option == RegressionOptions.SUBTRACT_MEAN:
            # the mean of no positions is NaN (LiberTEM's np.mean), without numpy's warning
            result[0] = field[usable].mean(axis=0) if usable.any() else np.nan
            return result
        if option == RegressionOptions.SUBTRACT_LINEAR:
            inp = regression_input(coords, nav_shape)
            result[:] = np.linalg.lstsq(inp[usable], field[usable], rcond=None)[0]
            return result
        # also a ValueError, LiberTEM's type for it
        raise udf_exception_class(ValueError)(
            f"CoMUDF: unrecognized regression option {regression!r}; use -1, 0, 1 or a (3, 2) array")
    arr = np.asarray(regression, dtype=np.float64)
    if arr.shape != (3, 2):
        raise udf_exception_class(ValueError)(
            f"CoMUDF: regression {regression!r} is not an option (-1, 0, 1) and not shaped (3, 2)")
    result[:] = arr
    return result
