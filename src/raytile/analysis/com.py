"""`COMAnalysis`: centre of mass of every frame (``create_com_analysis``), on :class:`~raytile.udf.ApplyMasksUDF`.

Three masks (the region, and the region weighted by y and by x) are applied
to every frame; the shifts of the centres of mass from ``(cy, cx)`` are then
corrected for ``flip_y`` and ``scan_rotation`` (degrees) with
:func:`raytile.udf.com_math.apply_correction` (the maths CoMUDF uses too).
The region is a disk of ``mask_radius`` (``r``), or with
``mask_radius_inner`` (``ri``) the ring between both.

Results (LiberTEM's keys): ``field`` (``(x, y)``, pictured as a colour
wheel), ``magnitude``, ``divergence`` and ``curl`` (when every nav dim is
larger than 1), ``x``, ``y``; for complex data ``x_real``, ``y_real``,
``x_imag``, ``y_imag``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile import masks as _masks
from raytile.analysis.masks import BaseMasksAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet, COMResultSet
from raytile.udf.com_math import apply_correction, center_shifts, com_masks_factory, com_masks_generic, curl_2d
from raytile.udf.com_math import divergence, magnitude
# at LiberTEM's path too (``libertem.analysis.com`` re-exports them from the UDF module)
from raytile.udf.com_math import GuessResult, coordinate_check, guess_corrections  # noqa: F401

__all__ = ["COMAnalysis"]


class COMAnalysis(BaseMasksAnalysis, id_="CENTER_OF_MASS"):
    """Centre-of-mass shifts of every frame; see the module docstring for the parameters and results."""

    def get_parameters(self, parameters: dict) -> dict:
        sy, sx = self._sig_2d()
        return {"cx": parameters.get("cx", sx / 2), "cy": parameters.get("cy", sy / 2),
                "r": parameters.get("r", float("inf")), "ri": parameters.get("ri", 0.0),
                "scan_rotation": parameters.get("scan_rotation", 0.0), "flip_y": parameters.get("flip_y", False),
                "use_sparse": parameters.get("use_sparse", False), "mask_count": 3, "mask_dtype": self._mask_dtype()}

    def _mask_dtype(self) -> type:
        """float64 masks for float and complex data, so that the moments are CoMUDF's (which takes them in
        float64) and the two agree to float64's rounding, as LiberTEM's analysis and UDF agree (both in
        float32 there); integer detector data keeps float32 masks (measured 4x less time a 256x256 uint16
        frame than float64 ones)."""
        return np.float64 if np.dtype(self.dataset.dtype).kind in "fc" else np.float32

    def get_mask_factories(self) -> Any:
        sy, sx = self._sig_2d()
        p = self.parameters
        if p.get("ri"):
            cy, cx, r, ri = p["cy"], p["cx"], p["r"], p["ri"]

            def ring() -> np.ndarray:
                return _masks.ring(centerX=cx, centerY=cy, imageSizeX=sx, imageSizeY=sy, radius=r, radius_inner=ri)

            return com_masks_generic(detector_y=sy, detector_x=sx, base_mask_factory=ring)
        return com_masks_factory(detector_y=sy, detector_x=sx, cx=p["cx"], cy=p["cy"], r=p["r"])

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        data = udf_results["intensity"].data
        return self.get_generic_results(data[..., 0], data[..., 1], data[..., 2], damage=damage)

    def get_generic_results(self, img_sum: np.ndarray, img_y: np.ndarray, img_x: np.ndarray,
                            damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import rgb_from_2dvector, visualize_simple

        p = self.parameters
        y_raw, x_raw = _shifts(img_sum, img_y, img_x, p["cy"], p["cx"])
        y_centers, x_centers = apply_correction(y_raw, x_raw, scan_rotation=p["scan_rotation"], flip_y=p["flip_y"])

        def picture(data: np.ndarray, valid: Any) -> Any:
            return lambda: visualize_simple(data, damage=valid)

        if img_sum.dtype.kind == "c":
            parts = [("x_real", "x [real]", np.real(x_centers)), ("y_real", "y [real]", np.real(y_centers)),
                     ("x_imag", "x [imag]", np.imag(x_centers)), ("y_imag", "y [imag]", np.imag(y_centers))]
            return COMResultSet([
                AnalysisResult(d, picture(d, damage), key=k, title=t,
                               desc=f"{k[0]} component of the center") for k, t, d in parts
            ])
        valid = np.asarray(damage) & np.isfinite(x_centers) & np.isfinite(y_centers)
        vmax = float(np.sqrt(np.max(x_centers[valid] ** 2 + y_centers[valid] ** 2))) if np.any(valid) else 1.0
        m = magnitude(y_centers, x_centers)
        results = [
            AnalysisResult((x_centers, y_centers), lambda: rgb_from_2dvector(x=x_centers, y=y_centers, vmax=vmax),
                           key="field", title="field", desc="cubehelix colorwheel visualization",
                           include_in_download=False),
            AnalysisResult(m, picture(m, valid), key="magnitude", title="magnitude",
                           desc="magnitude of the vector field"),
            AnalysisResult(x_centers, picture(x_centers, valid), key="x", title="x",
                           desc="x component of the center"),
            AnalysisResult(y_centers, picture(y_centers, valid), key="y", title="y",
                           desc="y component of the center"),
        ]
        if all(s > 1 for s in y_centers.shape):  # np.gradient needs two points along each axis
            d = divergence(y_centers, x_centers)
            c = curl_2d(y_centers, x_centers)
            results[2:2] = [
                AnalysisResult(d, picture(d, valid), key="divergence", title="divergence",
                               desc="divergence of the vector field"),
                AnalysisResult(c, picture(c, valid), key="curl", title="curl", desc="curl of the 2D vector field"),
            ]
        return COMResultSet(results)

    def need_rerun(self, old_params: dict, new_params: dict) -> bool:
        """Only ``flip_y`` and ``scan_rotation`` changed: the same UDF results, corrected anew."""
        ignore = {"flip_y", "scan_rotation"}
        return ({k: v for k, v in old_params.items() if k not in ignore}
                != {k: v for k, v in new_params.items() if k not in ignore})


def _shifts(img_sum: np.ndarray, img_y: np.ndarray, img_x: np.ndarray, ref_y: float,
            ref_x: float) -> tuple[np.ndarray, np.ndarray]:
    """The centre-of-mass shifts; NaN where the sums are NaN (outside a ROI), zero where a frame has none."""
    if img_sum.dtype.kind == "c":
        has = img_sum != 0
        safe = np.where(has, img_sum, 1)
        return (np.where(has, img_y / safe - ref_y, 0), np.where(has, img_x / safe - ref_x, 0))
    y, x = center_shifts(img_sum, img_y, img_x, ref_y, ref_x)
    outside = ~np.isfinite(img_sum)
    return np.where(outside, np.nan, y), np.where(outside, np.nan, x)
