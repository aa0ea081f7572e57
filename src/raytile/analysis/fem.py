"""``libertem.analysis.fem``: :class:`FEMAnalysis`, fluctuation EM over a ring (:class:`~raytile.udf.FEM.FEMUDF`)."""

from __future__ import annotations

from typing import Any

from raytile.analysis.base import BaseAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.udf.FEM import FEMUDF

__all__ = ["FEMAnalysis"]


class FEMAnalysis(BaseAnalysis, id_="FEM"):
    """Per frame, the standard deviation of the pixels in the ring ``ri < r <= ro`` around ``(cy, cx)``.

    Parameters (all required, as LiberTEM's): ``cx``, ``cy``, ``ri``, ``ro``.
    Result ``intensity``: nav-shaped float32, as ``FEMUDF``'s.

    >>> res = ctx.run(FEMAnalysis(dataset=ds, parameters={"cx": 8, "cy": 8, "ri": 4, "ro": 6}))
    >>> res.intensity.raw_data.shape == tuple(ds.shape.nav)
    True
    """

    def get_udf(self) -> FEMUDF:
        p = self.parameters
        return FEMUDF(center=(p["cy"], p["cx"]), rad_in=p["ri"], rad_out=p["ro"])

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        data = udf_results["intensity"].data
        picture = data.reshape(self.nav_shape)
        return AnalysisResultSet([
            AnalysisResult(data, lambda: visualize_simple(picture, damage=damage), key="intensity",
                           title="intensity", desc="result from SD calculation over ring"),
        ])
