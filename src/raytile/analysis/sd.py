"""``libertem.analysis.sd``: :class:`SDAnalysis`, the standard deviation of the frames (StdDevUDF)."""

from __future__ import annotations

from typing import Any

from raytile.analysis.base import BaseAnalysis, roi_from_parameters
from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.udf.stddev import StdDevUDF

__all__ = ["SDAnalysis"]


class SDAnalysis(BaseAnalysis, id_="SD_FRAMES"):
    """Per signal pixel, the standard deviation over the frames (of the ROI); results ``intensity``
    (log picture) and ``intensity_lin``, both holding the ``std`` array, as LiberTEM's."""

    def get_udf(self) -> StdDevUDF:
        return StdDevUDF()

    def get_roi(self) -> Any:
        return roi_from_parameters(self.parameters, self.nav_shape)

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        std = udf_results["std"].data
        return AnalysisResultSet([
            AnalysisResult(std, lambda: visualize_simple(std, logarithmic=True, damage=True),
                           key="intensity", title="intensity [log]", desc="Standard deviation of frames log-scaled"),
            AnalysisResult(std, lambda: visualize_simple(std, logarithmic=False, damage=True),
                           key="intensity_lin", title="intensity [lin]",
                           desc="Standard deviation of frames lin-scaled"),
        ])
