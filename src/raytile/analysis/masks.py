"""Analyses that apply masks with :class:`~raytile.udf.ApplyMasksUDF`: masks, disk, ring and point.

``create_mask_analysis`` gives one nav-shaped result per mask (``mask_0``,
``mask_1``, ...); ``create_disk_analysis``, ``create_ring_analysis`` and
``create_point_analysis`` one mask each, with results ``intensity`` (linear
picture) and ``intensity_log``. Defaults are LiberTEM's: the centre of the
frame, a disk of 0.3 times half the smaller side, a ring from 0.8 times to
the whole half side.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sparse

from raytile import masks as _masks
from raytile.analysis.base import BaseAnalysis, IncompatibleDataSet, roi_from_parameters
from raytile.analysis.results import AnalysisResult, AnalysisResultSet, MasksResultSet, SingleMaskResultSet
from raytile.udf.applymasks import ApplyMasksUDF

__all__ = ["BaseMasksAnalysis", "MasksAnalysis", "SingleMaskAnalysis", "DiskMaskAnalysis", "RingMaskAnalysis",
           "PointMaskAnalysis"]


class BaseMasksAnalysis(BaseAnalysis):
    """An analysis on :class:`~raytile.udf.ApplyMasksUDF`: subclasses give :meth:`get_mask_factories`."""

    def get_udf(self) -> ApplyMasksUDF:
        return ApplyMasksUDF(mask_factories=self.get_mask_factories(), use_sparse=self.get_use_sparse(),
                             mask_count=self.get_preset_mask_count(), mask_dtype=self.get_preset_mask_dtype(),
                             preferred_dtype=self.get_preset_dtype())

    def get_mask_factories(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement get_mask_factories()")

    def get_use_sparse(self) -> Any:
        return self.parameters.get("use_sparse", None)

    def get_preset_mask_count(self) -> int | None:
        return self.parameters.get("mask_count", None)

    def get_preset_mask_dtype(self) -> Any:
        return self.parameters.get("mask_dtype", None)

    def get_preset_dtype(self) -> Any:
        return self.parameters.get("dtype", None)

    def _sig_2d(self) -> tuple[int, int]:
        if len(self.sig_shape) != 2:
            raise IncompatibleDataSet(f"{type(self).__name__}: can only handle 2D signals, the data set's "
                                      f"signal shape is {self.sig_shape}")
        return self.sig_shape[0], self.sig_shape[1]


class MasksAnalysis(BaseMasksAnalysis):
    """The user's masks (``factories``); results ``mask_<i>``, nav-shaped (NaN outside a ROI)."""

    def get_mask_factories(self) -> Any:
        return self.parameters["factories"]

    def get_roi(self) -> Any:
        return roi_from_parameters(self.parameters, self.nav_shape)

    def get_generic_results(self, data: np.ndarray, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        if data.dtype.kind == "c":
            results: list[AnalysisResult] = []
            for idx in range(data.shape[-1]):
                results.extend(self.get_complex_results(
                    data[..., idx], key_prefix=f"mask_{idx}", title=f"mask {idx}",
                    desc=f"integrated intensity for mask {idx}", damage=damage))
            return MasksResultSet(results)

        def one(idx: int) -> AnalysisResult:
            part = data[..., idx]
            return AnalysisResult(part, lambda: visualize_simple(part, damage=damage), key=f"mask_{idx}",
                                  title=f"mask {idx}", desc=f"integrated intensity for mask {idx}")

        return MasksResultSet([one(idx) for idx in range(data.shape[-1])])

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        return self.get_generic_results(udf_results["intensity"].data, damage=damage)


class SingleMaskAnalysis(BaseMasksAnalysis):
    """One mask; results ``intensity`` (linear picture) and ``intensity_log``, nav-shaped."""

    def get_description(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement get_description()")

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        return self.get_generic_results(udf_results["intensity"].data[..., 0], damage=damage)

    def get_generic_results(self, data: np.ndarray, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        desc = self.get_description()
        if data.dtype.kind == "c":
            return SingleMaskResultSet(self.get_complex_results(data, key_prefix="intensity", title="intensity",
                                                                desc=desc, damage=damage))
        return SingleMaskResultSet([
            AnalysisResult(data, lambda: visualize_simple(data, damage=damage), key="intensity",
                           title="intensity [lin]", desc=f"{desc} lin-scaled"),
            AnalysisResult(data, lambda: visualize_simple(data, logarithmic=True, damage=damage),
                           key="intensity_log", title="intensity [log]", desc=f"{desc} log-scaled"),
        ])


class DiskMaskAnalysis(SingleMaskAnalysis, id_="APPLY_DISK_MASK"):
    """The integral over a disk of radius ``r`` around ``(cy, cx)``."""

    def get_description(self) -> str:
        return "intensity of the integration over the selected disk"

    def get_parameters(self, parameters: dict) -> dict:
        sy, sx = self._sig_2d()
        return {"cx": parameters.get("cx", sx / 2), "cy": parameters.get("cy", sy / 2),
                "r": parameters.get("r", min(sy, sx) / 2 * 0.3), "use_sparse": parameters.get("use_sparse", False),
                "mask_count": 1, "mask_dtype": np.float32}

    def get_mask_factories(self) -> list[Callable[[], np.ndarray]]:
        sy, sx = self._sig_2d()
        cx, cy, r = self.parameters["cx"], self.parameters["cy"], self.parameters["r"]

        def disk_mask() -> np.ndarray:
            return _masks.circular(centerX=cx, centerY=cy, imageSizeX=sx, imageSizeY=sy, radius=r)

        return [disk_mask]

    def need_rerun(self, old_params: dict, new_params: dict) -> bool:
        return old_params != new_params


class RingMaskAnalysis(SingleMaskAnalysis, id_="APPLY_RING_MASK"):
    """The integral over a ring ``ri < distance <= ro`` around ``(cy, cx)``."""

    def get_description(self) -> str:
        return "intensity of the integration over the selected ring"

    def get_parameters(self, parameters: dict) -> dict:
        sy, sx = self._sig_2d()
        ro = parameters.get("ro", min(sy, sx) / 2)
        return {"cx": parameters.get("cx", sx / 2), "cy": parameters.get("cy", sy / 2), "ri": parameters.get("ri", ro * 0.8),
                "ro": ro, "use_sparse": parameters.get("use_sparse", False), "mask_count": 1,
                "mask_dtype": np.float32}

    def get_mask_factories(self) -> list[Callable[[], np.ndarray]]:
        sy, sx = self._sig_2d()
        p = self.parameters
        cx, cy, ri, ro = p["cx"], p["cy"], p["ri"], p["ro"]

        def ring_mask() -> np.ndarray:
            return _masks.ring(centerX=cx, centerY=cy, imageSizeX=sx, imageSizeY=sy, radius=ro, radius_inner=ri)

        return [ring_mask]


class PointMaskAnalysis(SingleMaskAnalysis, id_="APPLY_POINT_SELECTOR"):
    """The value of the pixel ``(cy, cx)`` of every frame (a sparse one-pixel mask)."""

    def get_description(self) -> str:
        return "intensity of the integration over the selected point"

    def get_use_sparse(self) -> Any:
        return True

    def get_parameters(self, parameters: dict) -> dict:
        sy, sx = self._sig_2d()
        return {"cx": parameters.get("cx", sx / 2), "cy": parameters.get("cy", sy / 2), "mask_count": 1,
                "mask_dtype": np.float32}

    def get_mask_factories(self) -> list[Callable[[], Any]]:
        sig = self._sig_2d()
        cy, cx = int(self.parameters["cy"]), int(self.parameters["cx"])
        if not (0 <= cy < sig[0] and 0 <= cx < sig[1]):
            raise IncompatibleDataSet(f"point analysis: point (y={cy}, x={cx}) lies outside the signal shape {sig}")

        def point_mask() -> sparse.COO:
            return sparse.COO(data=np.array([1]), coords=np.array(([cy], [cx])), shape=sig)

        return [point_mask]
