"""`PickFrameAnalysis`: one frame at a nav position (``create_pick_analysis``), on :class:`~raytile.udf.PickUDF`."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.base import AnalysisParameterError, BaseAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet, PickResultSet
from raytile.udf.pick import PickUDF

__all__ = ["PickFrameAnalysis"]

_NEEDS = {
    1: "Need x, not y and not z to index 1D dataset, received z=%s, y=%s, x=%s",
    2: "Need x, y and not z to index 2D dataset, received z=%s, y=%s, x=%s",
    3: "Need x, y z to index 3D dataset, received z=%s, y=%s, x=%s",
}


class PickFrameAnalysis(BaseAnalysis, id_="PICK_FRAME"):
    """The frame at ``(z, y, x)`` (as many coordinates as nav dims); results ``intensity`` (log picture) and
    ``intensity_lin``, sig-shaped, in the data set's dtype."""

    def get_origin(self) -> tuple[int, ...]:
        """The nav coordinates of the frame, checked against the nav dims."""
        dims = len(self.nav_shape)
        if dims not in _NEEDS:
            raise AnalysisParameterError(f"pick analysis: can only pick from data sets with 1, 2 or 3 nav dims, "
                                         f"this one has {dims} ({self.nav_shape})")
        zyx = (self.parameters.get("z"), self.parameters.get("y"), self.parameters.get("x"))
        keep, drop = zyx[-dims:], zyx[:-dims]
        if None in keep or not all(d is None for d in drop):
            raise AnalysisParameterError(_NEEDS[dims] % zyx)
        origin = tuple(int(v) for v in keep if v is not None)
        for axis, (value, size) in enumerate(zip(origin, self.nav_shape)):
            if not 0 <= value < size:
                raise AnalysisParameterError(f"pick analysis: coordinate {value} of nav axis {axis} lies outside "
                                             f"the nav shape {self.nav_shape}")
        return origin

    def get_udf(self) -> PickUDF:
        return PickUDF()

    def get_roi(self) -> np.ndarray:
        roi = np.zeros(self.nav_shape, dtype=bool)
        roi[self.get_origin()] = True
        return roi

    def get_coords(self) -> str:
        return " ".join(f"{axis}={int(self.parameters[axis])}" for axis in ("x", "y", "z") if axis in self.parameters)

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        return self.get_generic_results(udf_results["intensity"].data[0], damage=True)

    def get_generic_results(self, data: np.ndarray, damage: Any) -> AnalysisResultSet:
        """The results for a sig-shaped ``data`` (the frame, or what a subclass made of it, e.g. its FFT):
        ``intensity`` (log picture) and ``intensity_lin``, or the complex keys for complex data."""
        from raytile.viz.images import visualize_simple

        coords = self.get_coords()
        if data.dtype.kind == "c":
            return AnalysisResultSet(self.get_complex_results(data, key_prefix="intensity", title="intensity",
                                                              desc=f"the frame at {coords}", damage=True,
                                                              default_lin=False))
        return PickResultSet([
            AnalysisResult(data, lambda: visualize_simple(data, logarithmic=True, damage=True), key="intensity",
                           title="intensity [log]", desc=f"the frame at {coords} log-scaled"),
            AnalysisResult(data, lambda: visualize_simple(data, logarithmic=False, damage=True),
                           key="intensity_lin", title="intensity [lin]", desc=f"the frame at {coords} lin-scaled"),
        ])
