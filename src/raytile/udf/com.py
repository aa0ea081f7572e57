"""`CoMUDF`: centre of mass of every frame inside a disk or ring, with LiberTEM's corrections and field results.

Besides the UDF, the helpers LiberTEM's ``libertem.udf.com`` offers under the
same names: :class:`RegressionOptions`, :class:`CoMParams`,
:func:`apply_correction`, :func:`divergence`, :func:`curl_2d`,
:func:`magnitude`, :func:`center_shifts`, :func:`coordinate_check`,
:func:`guess_corrections` (:class:`GuessResult`), :func:`com_masks_factory`
and :func:`com_masks_generic`.
"""

from __future__ import annotations

import functools
import math
from enum import IntEnum
from typing import Any, Callable, Literal, Mapping, NamedTuple, Union

import numpy as np
from sparseconverter import CUPY_BACKENDS

from raytile import masks as _masks
from raytile.common.container import MaskContainer
from raytile.common.errors import UDFException, udf_exception_class
from raytile.common import coordinates
from raytile.udf._tiles import TILE_BACKENDS
from raytile.udf.base import BACKEND_CUPY, BACKEND_NUMPY, UDF, UDFData
from raytile.udf.integer_tiles import frame_moments_into, is_real_tile, region_lanes, region_moments_into
from raytile.udf.maskengine import ApplyMasksEngine
from raytile.udf.worker_cache import scope_key

__all__ = [
    "CoMUDF", "CoMParams", "RegressionOptions", "RegressionOptionsT", "apply_correction", "curl_2d",
    "divergence", "magnitude", "correction_matrix", "center_shifts", "coordinate_check", "guess_corrections",
    "GuessResult", "com_masks_factory", "com_masks_generic", "moment_masks",
]


class RegressionOptions(IntEnum):
    """The ``regression`` choices of :class:`CoMUDF` (LiberTEM's values)."""

    NO_REGRESSION = -1
    SUBTRACT_MEAN = 0
    SUBTRACT_LINEAR = 1


#: A ``RegressionOptions`` value, -1/0/1, or a ``(3, 2)`` array ``[[y, x], [dy/dy, dx/dy], [dy/dx, dx/dx]]``.
RegressionOptionsT = Union[np.ndarray, Literal[-1, 0, 1], RegressionOptions]


class CoMParams(NamedTuple):
    """The parameters of :class:`CoMUDF` in one value, as in LiberTEM (``CoMUDF(CoMParams(r=5.0))``).

    >>> CoMParams(cy=7.0, cx=5.0, r=4.0).flip_y
    False
    """

    cy: float | None = None
    cx: float | None = None
    r: float = float("inf")
    ri: float | None = 0.0
    scan_rotation: float = 0.0
    flip_y: bool = False
    regression: RegressionOptionsT = RegressionOptions.NO_REGRESSION


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


_FLAT = ("cy", "cx", "r", "ri", "scan_rotation", "flip_y", "regression")


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
    region = np.asarray(region, dtype=np.float64)
    y, x = np.mgrid[:h, :w].astype(np.float64)
    return np.stack([region, y * region, x * region])


class _CoMParamsData(UDFData):
    """A CoMUDF's parameters, with LiberTEM's ``com_params`` (a :class:`CoMParams`) made from them."""

    def __getattr__(self, name: str) -> Any:
        if name == "com_params":
            return CoMParams(**{f: self._data[f] for f in CoMParams._fields})
        return super().__getattr__(name)


class CoMUDF(UDF):
    """Centre of mass of every frame, optionally within a disk or ring around ``(cy, cx)``.

    Create it with :meth:`with_params`, with keywords (``CoMUDF(r=5.0)``) or
    LiberTEM's way, ``CoMUDF(CoMParams(...))``; the parameters are kept
    individually, so live patches name them (``{"r": 4.0}``; a
    ``{"com_params": CoMParams(...)}`` patch sets them all). ``(cy, cx)``
    defaults to ``(sig_h // 2, sig_w // 2)`` as in LiberTEM; ``r=inf`` and
    ``ri=0`` use the whole frame. Needs a 2D signal. The results are
    LiberTEM's (``libertem.udf.com.CoMUDF``), computed in float64.

    Parameters (LiberTEM's): ``cy``, ``cx``, ``r``, ``ri`` (the region is
    the disk ``d <= r``, or the ring ``ri < d <= r`` when ``ri`` is not
    close to 0, see :func:`moment_masks`); ``scan_rotation`` (degrees;
    rotates the shift vectors into the scan's frame), ``flip_y`` (negate
    the y shift first, for detectors with the origin at the bottom),
    ``regression`` (see :class:`RegressionOptions`: -1 none, 0 subtract the
    mean field, 1 subtract a linear fit over the scan, or a ``(3, 2)``
    array to subtract ``[[y, x], [dy/dy, dx/dy], [dy/dx, dx/dx]]``).

    Results (nav unless noted; NaN outside the ROI):

    - ``raw_com`` ``(2,)``: ``(y, x)`` centre of mass in pixels. A frame
      without intensity in the region has nothing to weigh: its centre of
      mass is ``(cy, cx)`` (zero shift), as in LiberTEM, so it adds a zero
      vector to the field and to the regression fit rather than a hole;
    - ``raw_shifts`` ``(2,)``: ``raw_com - (cy, cx)``;
    - ``field`` ``(2,)``, ``field_y``, ``field_x``: the shifts after flip,
      rotation and regression (subtracted at the merged positions);
    - ``magnitude``: the length of ``field``;
    - ``divergence``, ``curl``: of ``field`` on a 2D scan (``np.gradient``
      over the whole scan grid). Positions outside the ROI have a NaN field
      there, as in LiberTEM, so a position whose differences reach one
      outside the ROI (the next row or column) is NaN too. Positions not
      merged yet count as zero field. Scans that are not 2D are refused
      with a ValueError, as in LiberTEM;
    - ``regression`` (single, ``(3, 2)``): the regression subtracted, fitted
      over the merged positions (all of the ROI once the run is done); a
      mean over no positions is NaN, as LiberTEM's;
    - ``moments`` ``(3,)``: the raw sums (intensity, y and x moments).

    Example::

        >>> udf = CoMUDF.with_params(cy=64, cx=64, r=30, scan_rotation=-12, regression=1)
        >>> res = ctx.run_udf(dataset=ds, udf=udf)
        >>> res["field"].data.shape, res["regression"].data.shape  # nav + (2,), (3, 2)
    """

    def __init__(self, com_params: CoMParams | None = None, cy: float | None = None, cx: float | None = None,
                 r: float = math.inf, ri: float | None = 0.0, scan_rotation: float = 0.0, flip_y: bool = False,
                 regression: RegressionOptionsT = RegressionOptions.NO_REGRESSION):
        flat: dict[str, Any] = dict(cy=cy, cx=cx, r=r, ri=ri, scan_rotation=scan_rotation, flip_y=flip_y,
                                    regression=regression)
        if com_params is not None:
            flat.update(self._unpack_com_params(com_params))
        super().__init__(**flat)

    @property
    def params(self) -> UDFData:
        """The parameters; ``params.com_params`` is them as LiberTEM's :class:`CoMParams` (as given)."""
        return self._params

    @params.setter
    def params(self, value: UDFData) -> None:
        self._params = _CoMParamsData(value._data)

    @staticmethod
    def _unpack_com_params(com_params: Any) -> dict[str, Any]:
        asdict = getattr(com_params, "_asdict", None)
        if asdict is None:
            raise UDFException(
                f"CoMUDF: com_params must be a CoMParams, got {com_params!r}; "
                "pass cy, cx, r, ri, ... as keywords or use CoMUDF.with_params"
            )
        values = dict(asdict())
        unknown = set(values) - set(_FLAT)
        if unknown:
            raise UDFException(f"CoMUDF: com_params has unknown fields {sorted(unknown)}")
        return values

    @classmethod
    def with_params(cls, cy: float | None = None, cx: float | None = None, r: float = math.inf,
                    ri: float | None = 0.0, scan_rotation: float = 0.0, flip_y: bool = False,
                    regression: RegressionOptionsT = RegressionOptions.NO_REGRESSION, **kwargs: Any) -> "CoMUDF":
        """The CoM UDF for centre ``(cy, cx)`` (default: signal centre), ring ``ri < d <= r`` and corrections.

        Raises ``ValueError`` if ``ri >= r`` (as LiberTEM does).
        """
        if ri is not None and ri >= r:
            raise ValueError("Inner radius must be less than outer radius for annular CoM")
        return cls(cy=cy, cx=cx, r=r, ri=ri, scan_rotation=scan_rotation, flip_y=flip_y, regression=regression,
                   **kwargs)

    def update_parameters(self, patch: Mapping[str, Any]) -> None:
        patch = dict(patch)
        if "com_params" in patch:
            patch.update(self._unpack_com_params(patch.pop("com_params")))
        super().update_parameters(patch)

    def centre(self) -> tuple[float, float]:
        """``(cy, cx)``: the parameters, or the signal centre ``(sig_h // 2, sig_w // 2)``."""
        sig = self.meta.dataset_shape.sig.to_tuple()
        cy = sig[0] // 2 if self.params.cy is None else float(self.params.cy)
        cx = sig[1] // 2 if self.params.cx is None else float(self.params.cx)
        return float(cy), float(cx)

    def get_params(self) -> CoMParams:
        """The parameters with the centre filled in (LiberTEM's ``CoMUDF.get_params``)."""
        cy, cx = self.centre()
        p = self.params
        return CoMParams(cy=cy, cx=cx, r=p.r, ri=p.ri, scan_rotation=p.scan_rotation, flip_y=bool(p.flip_y),
                         regression=p.regression)

    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def get_preferred_input_dtype(self) -> Any:
        # the data as it is: dense numpy tiles are weighed in float64 as they are read (no float copy),
        # others converted to float64 by the mask engine
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self):
        # LiberTEM's ValueError (a UDFException too, with raytile's message)
        shape = self.meta.dataset_shape
        if len(shape.sig) != 2:
            raise udf_exception_class(ValueError)(
                f"{type(self).__name__} needs a 2D signal, got sig shape {shape.sig.to_tuple()}")
        if len(shape.nav) != 2:
            raise udf_exception_class(ValueError)(
                f"{type(self).__name__} needs a 2D nav shape (LiberTEM's CoMUDF only works with 2D nav shape), "
                f"got nav shape {shape.nav.to_tuple()}")
        f64 = "float64"
        return {
            # (intensity, y moment, x moment) per frame, merged like any nav buffer
            "moments": self.buffer(kind="nav", extra_shape=(3,), dtype=f64, where="device"),
            "raw_com": self.buffer(kind="nav", extra_shape=(2,), dtype=f64, use="result_only"),
            "raw_shifts": self.buffer(kind="nav", extra_shape=(2,), dtype=f64, use="result_only"),
            "field": self.buffer(kind="nav", extra_shape=(2,), dtype=f64, use="result_only"),
            "field_y": self.buffer(kind="nav", dtype=f64, use="result_only"),
            "field_x": self.buffer(kind="nav", dtype=f64, use="result_only"),
            "magnitude": self.buffer(kind="nav", dtype=f64, use="result_only"),
            "divergence": self.buffer(kind="nav", dtype=f64, use="result_only"),
            "curl": self.buffer(kind="nav", dtype=f64, use="result_only"),
            "regression": self.buffer(kind="single", extra_shape=(3, 2), dtype=f64, use="result_only"),
        }

    def get_task_data(self) -> dict[str, Any]:
        sig = tuple(self.meta.dataset_shape.sig.to_tuple())
        cy, cx = self.centre()
        ri = None if self.params.ri is None else float(self.params.ri)
        factory = functools.partial(moment_masks, sig, cy, cx, float(self.params.r), ri)
        backend = BACKEND_CUPY if self.meta.array_backend in CUPY_BACKENDS else BACKEND_NUMPY
        cache = self.meta.worker_cache

        def make() -> tuple[MaskContainer, np.ndarray, np.ndarray, np.ndarray | None]:
            masks = MaskContainer(factory, dtype=np.float64, use_sparse=False, count=3, backend=backend)
            # once per params version on a worker, when cached; the region and the region times x are
            # the moments kernel's weights (the y moment is taken per row)
            stack = np.asarray(masks.computed_masks) if backend == BACKEND_NUMPY else np.zeros((3, 1, 1))
            region = np.ascontiguousarray(stack[0], np.float64)
            return masks, region, np.ascontiguousarray(stack[2], np.float64), region_lanes(region)

        masks, region, xregion, lanes = make() if cache is None else cache.get_or_make(
            ("CoMUDF.moments", cy, cx, float(self.params.r), ri) + scope_key(self.meta, backend), make)
        return {"engine": ApplyMasksEngine(masks, self.meta), "region": region, "xregion": xregion,
                "lanes": lanes}

    def process_tile(self, tile) -> None:
        out = self.results.moments
        sig = self.meta.sig_slice.sig
        h, w = sig.shape.to_tuple()
        frames = tile.reshape((tile.shape[0], h, w)) if isinstance(tile, np.ndarray) else tile
        td = self.task_data
        weights = getattr(td, "region", None)  # (None in a subclass with task data of its own: the engine)
        if (weights is not None and is_real_tile(frames, 3) and isinstance(out, np.ndarray)
                and out.flags.c_contiguous):
            # one float64 pass over the frames as they are (measured 4x less time a frame than converting
            # the tile to float64 and multiplying it with the three masks, 256x256 uint16 frames)
            window = sig.get()
            if td.lanes is not None and frames.dtype.itemsize <= 2 and frames.dtype.kind in "ui":
                # 8/16-bit frames in a 0/1 region (disks, rings): exact int32 row and column sums,
                # 2-3x less time a frame again
                lanes = td.lanes[window]
                if not lanes.flags.c_contiguous:
                    lanes = np.ascontiguousarray(lanes)
                region_moments_into(frames, lanes, sig.origin[0], sig.origin[1], out)
                return
            region, xregion = weights[window], td.xregion[window]
            if not region.flags.c_contiguous:  # a tile cut within rows
                region, xregion = np.ascontiguousarray(region), np.ascontiguousarray(xregion)
            frame_moments_into(frames, region, xregion, sig.origin[0], out)
            return
        out += self.task_data.engine.process_tile(tile)

    # -- results -------------------------------------------------------------------------------
    def _nav_coords(self) -> np.ndarray:
        """Nav coordinates ``(positions, nav_dims)`` of the rows of the (ROI-compressed) nav buffers."""
        nav = self.meta.dataset_shape.nav.to_tuple()
        roi = self.meta.roi
        flat = np.arange(math.prod(nav)) if roi is None else np.flatnonzero(np.asarray(roi).reshape(-1))
        return np.stack(np.unravel_index(flat, nav), axis=1)

    def get_regression(self, field: np.ndarray, usable: np.ndarray, coords: np.ndarray) -> np.ndarray:
        """The ``(3, 2)`` regression to subtract, fitted on ``field[usable]`` (rows at nav ``coords``).

        ``usable`` marks the merged positions, empty frames included (their
        field is the zero vector), as LiberTEM fits over its valid nav mask.
        """
        reg = self.params.regression
        result = np.zeros((3, 2))
        if isinstance(reg, (int, np.integer)) and not isinstance(reg, bool):
            option = int(reg)
            if option == RegressionOptions.NO_REGRESSION:
                return result
            if option == RegressionOptions.SUBTRACT_MEAN:
                # the mean of no positions is NaN (LiberTEM's np.mean), without numpy's warning
                result[0] = field[usable].mean(axis=0) if usable.any() else np.nan
                return result
            if option == RegressionOptions.SUBTRACT_LINEAR:
                inp = self._regression_input(coords)
                result[:] = np.linalg.lstsq(inp[usable], field[usable], rcond=None)[0]
                return result
            # also a ValueError, LiberTEM's type for it
            raise udf_exception_class(ValueError)(
                f"CoMUDF: unrecognized regression option {reg!r}; use -1, 0, 1 or a (3, 2) array")
        arr = np.asarray(reg, dtype=np.float64)
        if arr.shape != (3, 2):
            raise udf_exception_class(ValueError)(
                f"CoMUDF: regression {reg!r} is not an option (-1, 0, 1) and not shaped (3, 2)")
        result[:] = arr
        return result

    def _regression_input(self, coords: np.ndarray) -> np.ndarray:
        """``[1, y, x]`` per position for a linear regression over a 2D scan."""
        if coords.shape[1] != 2:
            raise UDFException(
                f"CoMUDF: a linear regression needs a 2D scan, got nav shape {self.meta.dataset_shape.nav.to_tuple()}"
            )
        return np.concatenate([np.ones((coords.shape[0], 1)), coords.astype(np.float64)], axis=1)

    def get_field_results(self, field_y: np.ndarray, field_x: np.ndarray) -> dict[str, np.ndarray]:
        """Results derived from the field on the full 2D nav grid (LiberTEM's hook for subclasses such as iCoM).

        ``field_y``/``field_x`` are nav-shaped, NaN outside the ROI (as LiberTEM passes them).
        Return nav-shaped arrays; :meth:`get_results` keeps the ROI positions.
        """
        return {
            "magnitude": magnitude(field_y, field_x),
            "divergence": divergence(field_y, field_x),
            "curl": curl_2d(field_y, field_x),
        }

    def get_results(self) -> dict[str, Any]:
        m = np.asarray(self.results.moments, dtype=np.float64).reshape(-1, 3)
        merged = self.meta.get_valid_nav_mask()
        merged = np.ones(len(m), dtype=bool) if merged is None else np.asarray(merged, dtype=bool).reshape(-1)
        # positions not merged yet have no moments (LiberTEM's zeroed buffer): a zero shift, like empty frames
        m = np.where(merged[:, None], m, 0.0)
        cy, cx = self.centre()
        shift_y, shift_x = center_shifts(m[:, 0], m[:, 1], m[:, 2], cy, cx)
        shifts = np.stack([shift_y, shift_x], axis=1)
        com = shifts + np.array([cy, cx])
        field_y, field_x = apply_correction(shift_y, shift_x, self.params.scan_rotation, bool(self.params.flip_y))
        field = np.stack([field_y, field_x], axis=1)

        coords = self._nav_coords()
        regression = self.get_regression(field, merged, coords)
        if not np.allclose(regression, 0):
            if np.allclose(regression[1:], 0):
                field[merged] -= regression[0]
            else:
                field[merged] -= self._regression_input(coords[merged]) @ regression

        results: dict[str, Any] = {
            "raw_com": com,
            "raw_shifts": shifts,
            "field": field,
            "field_y": field[:, 0].copy(),
            "field_x": field[:, 1].copy(),
            "regression": regression,
        }
        nav = self.meta.dataset_shape.nav.to_tuple()  # 2D (get_result_buffers checks)
        grid = np.full(nav + (2,), np.nan)  # no field outside the ROI (LiberTEM's NaN-filled buffer)
        grid[coords[:, 0], coords[:, 1]] = field
        derived = self.get_field_results(field_y=grid[..., 0], field_x=grid[..., 1])
        for name, arr in derived.items():
            results[name] = np.asarray(arr)[coords[:, 0], coords[:, 1]].astype(np.float64)
        return results
