"""`SumAnalysis`: the sum of all frames (``create_sum_analysis``), on :class:`~raytile.udf.SumUDF`."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.base import BaseAnalysis, roi_from_parameters
from raytile.analysis.results import AnalysisResult, AnalysisResultSet, SumResultSet
from raytile.udf.sum import SumUDF

__all__ = ["SumAnalysis"]


class SumAnalysis(BaseAnalysis, id_="SUM_FRAMES"):
    """Sums the frames; results ``intensity`` (log picture) and ``intensity_lin``, sig-shaped.

    Complex data give LiberTEM's complex keys (``intensity`` is then the
    log-pictured magnitude, plus ``intensity_lin``, ``_real``, ``_imag``,
    ``_angle``, ``_complex``).
    """

    def get_udf(self) -> SumUDF:
        dtype = np.dtype(self.dataset.dtype)
        return SumUDF(dtype=dtype if dtype.kind in ("c", "f") else np.dtype("float32"))

    def get_roi(self) -> Any:
        return roi_from_parameters(self.parameters, self.nav_shape)

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        data = udf_results["intensity"].data
        if data.dtype.kind == "c":
            return AnalysisResultSet(self.get_complex_results(data, key_prefix="intensity", title="intensity",
                                                              desc="sum of all frames", damage=True,
                                                              default_lin=False))
        return SumResultSet([
            AnalysisResult(data, lambda: visualize_simple(data, logarithmic=True, damage=True),
                           key="intensity", title="intensity [log]", desc="sum of frames log-scaled"),
            AnalysisResult(data, lambda: visualize_simple(data, logarithmic=False, damage=True),
                           key="intensity_lin", title="intensity [lin]", desc="sum of frames lin-scaled"),
        ])
