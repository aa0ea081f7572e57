"""``libertem.analysis.apply_fft_mask``: :class:`ApplyFFTMask`, the crystallinity of every frame
(:class:`~raytile.udf.crystallinity.CrystallinityUDF`)."""

from __future__ import annotations

from typing import Any

from raytile.analysis.base import BaseAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.udf.crystallinity import CrystallinityUDF

__all__ = ["ApplyFFTMask"]


class ApplyFFTMask(BaseAnalysis, id_="APPLY_FFT_MASK"):
    """Per frame, the Fourier amplitude integrated over the ring ``rad_in < r <= rad_out`` around zero
    frequency, after masking the disk of radius ``real_rad`` around ``(real_centery, real_centerx)`` out
    of the frame (LiberTEM's parameters, all required). Result ``intensity``: nav-shaped float32.

    >>> res = ctx.run(ApplyFFTMask(dataset=ds, parameters={"rad_in": 0, "rad_out": 3, "real_centerx": 2,
    ...                                                    "real_centery": 2, "real_rad": 0}))
    """

    def get_udf(self) -> CrystallinityUDF:
        p = self.parameters
        return CrystallinityUDF(rad_in=p["rad_in"], rad_out=p["rad_out"],
                                real_center=(p["real_centery"], p["real_centerx"]), real_rad=p["real_rad"])

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        data = udf_results["intensity"].data
        picture = data.reshape(self.nav_shape)
        return AnalysisResultSet([
            AnalysisResult(data, lambda: visualize_simple(picture, damage=True), key="intensity",
                           title="intensity", desc="result from integration over mask in Fourier space"),
        ])
