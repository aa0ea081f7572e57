"""``libertem.analysis.sumsig``: :class:`SumSigAnalysis`, each frame's sum as a nav image (SumSigUDF)."""

from __future__ import annotations

from typing import Any

from raytile.analysis.base import BaseAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.udf.sumsigudf import SumSigUDF

__all__ = ["SumSigAnalysis"]


class SumSigAnalysis(BaseAnalysis, id_="SUM_SIG"):
    """The sum over each frame; result ``intensity`` (nav-shaped), as LiberTEM's."""

    def get_udf(self) -> SumSigUDF:
        return SumSigUDF()

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        data = udf_results["intensity"].data.reshape(self.nav_shape)
        return AnalysisResultSet([
            AnalysisResult(data, lambda: visualize_simple(data, damage=damage),
                           key="intensity", title="intensity", desc="result from frame integration"),
        ])
