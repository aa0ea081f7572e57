"""`AnalysisMethods`: LiberTEM's Analysis API on :class:`raytile.Context` (``create_*_analysis``, ``run``).

Each ``create_*_analysis`` builds an :class:`~raytile.analysis.base.Analysis`
with LiberTEM 0.16's name, parameters and checks; ``ctx.run(analysis)``
runs its UDF through ``ctx.run_udf`` (so it runs on Ray or inline like any
run) and returns an :class:`~raytile.analysis.results.AnalysisResultSet`::

    res = ctx.run(ctx.create_ring_analysis(dataset=ds, cx=128, cy=128, ri=20, ro=60), progress=True)
    res.intensity.raw_data          # nav-shaped; NaN outside a ROI
    plt.imshow(res.intensity.visualized)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.base import Analysis, AnalysisParameterError, IncompatibleDataSet, dense_roi
from raytile.analysis.com import COMAnalysis
from raytile.analysis.masks import DiskMaskAnalysis, MasksAnalysis, PointMaskAnalysis, RingMaskAnalysis
from raytile.analysis.pick import PickFrameAnalysis
from raytile.analysis.radialfourier import RadialFourierAnalysis
from raytile.analysis.results import AnalysisResultSet
from raytile.analysis.sum import SumAnalysis
from raytile.io.dataset import DataSet

__all__ = ["AnalysisMethods", "run_analysis"]


def _given(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _need_sig_2d(dataset: DataSet) -> None:
    if dataset.shape.sig.dims != 2:
        raise IncompatibleDataSet(f"incompatible dataset: need two signal dimensions, the signal shape is "
                                  f"{tuple(dataset.shape.sig.to_tuple())}")


def run_analysis(ctx: Any, analysis: Analysis, roi: Any = None, progress: Any = False,
                 corrections: Any = None) -> AnalysisResultSet:
    """Run ``analysis``'s UDF on ``ctx`` (``ctx.run_udf``) and convert the results (see :meth:`AnalysisMethods.run`)."""
    if not isinstance(analysis, Analysis):
        raise AnalysisParameterError(f"Context.run takes an Analysis (from ctx.create_*_analysis), got "
                                     f"{type(analysis).__name__}; run UDFs with ctx.run_udf")
    nav = tuple(analysis.dataset.shape.nav.to_tuple())
    run_on = getattr(analysis, "run_on", None)
    if run_on is not None:  # an analysis of several runs (ClusterAnalysis) runs them itself
        return run_on(ctx, roi=dense_roi(roi, nav), progress=progress, corrections=corrections)
    roi = dense_roi(analysis.get_roi() if roi is None else roi, nav)
    udf_results = ctx.run_udf(dataset=analysis.dataset, udf=analysis.get_udf(), roi=roi, corrections=corrections,
                              progress=progress)
    damage: Any = True if roi is None else np.asarray(roi, dtype=bool).reshape(nav)
    return analysis.get_udf_results(udf_results, roi, damage=damage)


class AnalysisMethods:
    """The ``create_*_analysis`` methods and ``run`` of :class:`raytile.Context` (a mixin)."""

    def run(self, job: Analysis, roi: Any = None, progress: Any = False, corrections: Any = None) -> AnalysisResultSet:
        """Run an Analysis and return its :class:`~raytile.analysis.results.AnalysisResultSet`.

        ``roi``: a bool nav mask, a sparse array or coordinates (default: the
        analysis' own, e.g. the picked frame); ``progress``: a progress bar;
        ``corrections``: a :class:`~raytile.CorrectionSet`.

        >>> res = ctx.run(ctx.create_sum_analysis(dataset=ds), progress=True)
        >>> res.intensity.raw_data.shape == tuple(ds.shape.sig)
        True
        """
        return run_analysis(self, job, roi=roi, progress=progress, corrections=corrections)

    def create_mask_analysis(self, factories: Any, dataset: DataSet, use_sparse: Any = None,
                             mask_count: int | None = None, mask_dtype: Any = None, dtype: Any = None) -> MasksAnalysis:
        """Apply the masks that ``factories`` make (one callable making a stack, or a list of callables);
        results ``mask_0``, ``mask_1``, ..., nav-shaped. ``use_sparse``, ``mask_count``, ``mask_dtype`` as
        :class:`~raytile.udf.ApplyMasksUDF`; ``dtype``: the dtype to compute in."""
        return MasksAnalysis(dataset=dataset, parameters={"factories": factories, "use_sparse": use_sparse,
                                                          "mask_count": mask_count, "mask_dtype": mask_dtype,
                                                          "dtype": dtype})

    def create_com_analysis(self, dataset: DataSet, cx: float | None = None, cy: float | None = None,
                            mask_radius: float | None = None, flip_y: bool = False,
                            mask_radius_inner: float | None = None, scan_rotation: float = 0.0) -> COMAnalysis:
        """Centre of mass of every frame relative to ``(cy, cx)`` (default: the frame centre), within
        ``mask_radius`` (or the ring from ``mask_radius_inner``); ``flip_y`` and ``scan_rotation`` (degrees,
        positive rotates the shifts clockwise) correct the detector's orientation. Results ``field``,
        ``magnitude``, ``divergence``, ``curl``, ``x``, ``y``."""
        if dataset.shape.nav.dims != 2:
            raise IncompatibleDataSet(f"incompatible dataset: need two navigation dimensions, the nav shape is "
                                      f"{tuple(dataset.shape.nav.to_tuple())}")
        _need_sig_2d(dataset)
        parameters = _given(cx=cx, cy=cy, flip_y=flip_y, scan_rotation=scan_rotation)
        if mask_radius is not None:
            parameters["r"] = mask_radius
        if mask_radius_inner is not None:
            if mask_radius is None:
                raise AnalysisParameterError("incompatible parameters: must pass both `mask_radius` and "
                                             "`mask_radius_inner` for annular CoM")
            parameters["ri"] = mask_radius_inner
        return COMAnalysis(dataset=dataset, parameters=parameters)

    def create_radial_fourier_analysis(self, dataset: DataSet, cx: float | None = None, cy: float | None = None,
                                       ri: float | None = None, ro: float | None = None, n_bins: int | None = None,
                                       max_order: int | None = None,
                                       use_sparse: Any = None) -> RadialFourierAnalysis:
        """Fourier coefficients (orders 0 .. ``max_order``, default 24) over the angle in ``n_bins`` rings
        between ``ri`` and ``ro`` around ``(cy, cx)``."""
        _need_sig_2d(dataset)
        return RadialFourierAnalysis(dataset=dataset, parameters=_given(cx=cx, cy=cy, ri=ri, ro=ro, n_bins=n_bins,
                                                                        max_order=max_order, use_sparse=use_sparse))

    def create_disk_analysis(self, dataset: DataSet, cx: float | None = None, cy: float | None = None,
                             r: float | None = None) -> DiskMaskAnalysis:
        """The integral over a disk of radius ``r`` around ``(cy, cx)``; results ``intensity``, ``intensity_log``."""
        _need_sig_2d(dataset)
        return DiskMaskAnalysis(dataset=dataset, parameters=_given(cx=cx, cy=cy, r=r))

    def create_ring_analysis(self, dataset: DataSet, cx: float | None = None, cy: float | None = None,
                             ri: float | None = None, ro: float | None = None) -> RingMaskAnalysis:
        """The integral over the ring ``ri < r <= ro`` around ``(cy, cx)``; results ``intensity``,
        ``intensity_log``.

        >>> res = ctx.run(ctx.create_ring_analysis(dataset=ds, ri=20, ro=60))
        """
        _need_sig_2d(dataset)
        return RingMaskAnalysis(dataset=dataset, parameters=_given(cx=cx, cy=cy, ri=ri, ro=ro))

    def create_point_analysis(self, dataset: DataSet, x: int | None = None, y: int | None = None) -> PointMaskAnalysis:
        """The pixel ``(y, x)`` of every frame; results ``intensity``, ``intensity_log``."""
        if dataset.shape.nav.dims > 2:
            raise IncompatibleDataSet(f"incompatible dataset: need at most two navigation dimensions, the nav "
                                      f"shape is {tuple(dataset.shape.nav.to_tuple())}")
        return PointMaskAnalysis(dataset=dataset, parameters=_given(cx=x, cy=y))

    def create_sum_analysis(self, dataset: DataSet) -> SumAnalysis:
        """The sum of all frames; results ``intensity`` (log picture), ``intensity_lin``, sig-shaped."""
        return SumAnalysis(dataset=dataset, parameters={})

    def create_pick_analysis(self, dataset: DataSet, x: int, y: int | None = None,
                             z: int | None = None) -> PickFrameAnalysis:
        """The frame at ``(z, y, x)`` (one coordinate per nav dim); results ``intensity``, ``intensity_lin``."""
        return PickFrameAnalysis(dataset=dataset, parameters=_given(x=x, y=y, z=z))
