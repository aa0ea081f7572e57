"""`CoMUDF`: centre of mass of every frame inside a disk or ring, with LiberTEM's corrections and field results.

Besides the UDF, the helpers LiberTEM's ``libertem.udf.com`` offers under the
same names: :class:`RegressionOptions`, :class:`CoMParams`,
:func:`apply_correction`, :func:`divergence`, :func:`curl_2d`,
:func:`magnitude`, :func:`center_shifts`, :func:`coordinate_check`,
:func:`guess_corrections` (:class:`GuessResult`), :func:`com_masks_factory`
and :func:`com_masks_generic`. Their maths lives in :mod:`raytile.udf.com_math`,
which the Analysis API (:mod:`raytile.analysis.com`) shares.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping, NamedTuple

import numpy as np
from sparseconverter import CUPY_BACKENDS

from raytile.common.container import MaskContainer
from raytile.common.errors import UDFException, udf_exception_class
from raytile.udf._tiles import SCIPY_ARRAY_BACKENDS, TILE_BACKENDS
from raytile.udf.base import BACKEND_CUPY, BACKEND_NUMPY, UDF, UDFData
# LiberTEM's ``libertem.udf.com`` offers the maths under these names too
from raytile.udf.com_math import (
    GuessResult, RegressionOptions, RegressionOptionsT, apply_correction, center_shifts, com_masks_factory,
    com_masks_generic, coordinate_check, correction_matrix, curl_2d, divergence, fit_regression, guess_corrections,
    magnitude, moment_masks, regression_input,
)
from raytile.udf.integer_tiles import frame_moments_into, is_real_tile, region_lanes, region_moments_into
from raytile.udf.maskengine import ApplyMasksEngine
from raytile.udf.worker_cache import scope_key

__all__ = [
    "CoMUDF", "CoMParams", "RegressionOptions", "RegressionOptionsT", "apply_correction", "curl_2d",
    "divergence", "magnitude", "correction_matrix", "center_shifts", "coordinate_check", "guess_corrections",
    "GuessResult", "com_masks_factory", "com_masks_generic", "moment_masks",
]


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


_FLAT = ("cy", "cx", "r", "ri", "scan_rotation", "flip_y", "regression")
#: Frames and bytes a tile of CoMUDF holds at most (see :meth:`CoMUDF.get_tiling_preferences`).
_TILE_FRAMES = 64
_TILE_BYTES = 8 * 2**20


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
        return TILE_BACKENDS + SCIPY_ARRAY_BACKENDS

    def get_preferred_input_dtype(self) -> Any:
        # the data as it is: dense numpy tiles are weighed in float64 as they are read (no float copy),
        # others converted to float64 by the mask engine
        return self.USE_NATIVE_DTYPE

    def get_tiling_preferences(self) -> dict:
        # 64 frames a tile within 8 MiB (whole 256x256 uint16 frames: 16 groups of four for the kernel), not
        # the default 4 MiB: the per-tile work (views of the moments buffer, the checks below) is then paid
        # half as often; measured inline on 256x256 uint16, 16.1-17.1 against 18.1-18.5 us CPU a frame
        return {"depth": _TILE_FRAMES, "total_size": _TILE_BYTES}

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
        return fit_regression(self.params.regression, field, usable, coords, self.meta.dataset_shape.nav.to_tuple())

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
        nav = self.meta.dataset_shape.nav.to_tuple()  # 2D (get_result_buffers checks)
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
                field[merged] -= regression_input(coords[merged], nav) @ regression

        results: dict[str, Any] = {
            "raw_com": com,
            "raw_shifts": shifts,
            "field": field,
            "field_y": field[:, 0].copy(),
            "field_x": field[:, 1].copy(),
            "regression": regression,
        }
        grid = np.full(nav + (2,), np.nan)  # no field outside the ROI (LiberTEM's NaN-filled buffer)
        grid[coords[:, 0], coords[:, 1]] = field
        derived = self.get_field_results(field_y=grid[..., 0], field_x=grid[..., 1])
        for name, arr in derived.items():
            results[name] = np.asarray(arr)[coords[:, 0], coords[:, 1]].astype(np.float64)
        return results
