"""``libertem.analysis.clust``: :class:`ClusterAnalysis`, frames grouped by the intensity at their strongest
varying peaks.

Two runs, as LiberTEM's: :class:`~raytile.udf.stddev.StdDevUDF` over the
frames (in the ROI of ``parameters["roi"]``) finds the ``n_peaks`` strongest
local maxima of the standard deviation map (inside the ring ``ri < r <= ro``
around ``(cy, cx)``, at least ``min_dist`` apart; ``skimage``'s
``peak_local_max``); :class:`~raytile.udf.masks.ApplyMasksUDF` then reads
each frame's intensity at those peaks, and ward-linkage agglomerative
clustering (``sklearn``; neighbouring scan positions connected) sorts the
frames into ``n_clust`` groups. Result ``intensity``: nav-shaped labels
``1 .. n_clust``.

``ctx.run(ClusterAnalysis(dataset=ds, parameters={...}))`` does both runs
(LiberTEM's ``Context.run`` cannot: its ``get_udf`` is None, so it needs the
web GUI's ``controller``, which raytile has as well). Needs scikit-learn
and scikit-image (the ``analysis`` extra).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import numpy as np

from raytile.analysis.base import AnalysisParameterError, BaseAnalysis
from raytile.analysis.getroi import get_roi
from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.common.errors import UDFRunCancelled
from raytile.masks import _make_circular_mask
from raytile.udf.masks import ApplyMasksUDF
from raytile.udf.stddev import StdDevUDF, consolidate_result

__all__ = ["ClusterAnalysis"]


def _array(value: Any) -> np.ndarray:
    """A result (an array, or a buffer with ``.data``) as an ndarray."""
    return value if isinstance(value, np.ndarray) else np.asarray(getattr(value, "data", value))


def _sync_context(executor: Any) -> Any:
    """Something with ``run_udf`` for :meth:`ClusterAnalysis.controller`: a Context as it is, or the
    Context of an :class:`~raytile.executor.base.AsyncAdapter`."""
    if hasattr(executor, "run_udf"):
        return executor
    as_context = getattr(executor, "as_context", None)
    if as_context is None:
        raise AnalysisParameterError(
            f"ClusterAnalysis.controller: executor={type(executor).__name__} cannot run UDFs; pass a raytile "
            f"Context or raytile.executor.base.AsyncAdapter(wrapped=<executor>)")
    return as_context()


class ClusterAnalysis(BaseAnalysis, id_="CLUST"):
    """Clusters the frames by their intensity at the peaks of the standard deviation map (see the module).

    Parameters, as LiberTEM's: ``n_peaks``, ``n_clust``, ``min_dist``, ``cx``,
    ``cy``, ``ri``, ``ro`` (the ring is left out when any of ``cy``, ``cx``,
    ``ri``, ``ro`` is None), and an optional ``roi`` (``{"shape": "disk" |
    "rect", ...}``) for the standard deviation run.

    >>> res = ctx.run(ClusterAnalysis(dataset=ds, parameters={"n_peaks": 23, "n_clust": 7, "cy": 3, "cx": 3,
    ...                                                       "ri": 1, "ro": 5, "min_dist": 1}))
    >>> res.intensity.raw_data.shape == tuple(ds.shape.nav)
    True
    """

    def get_udf(self) -> Any:
        """None, as LiberTEM's: the analysis runs two UDFs (:meth:`run_on`, :meth:`controller`)."""
        return None

    def get_sd_roi(self) -> np.ndarray | None:
        """The ROI of the standard deviation run, from ``parameters["roi"]``."""
        return get_roi(params=self.parameters, shape=self.nav_shape)

    def run_sd(self, ctx: Any, roi: Any = None, progress: Any = False,
               corrections: Any = None) -> tuple[Any, dict[str, Any]]:
        """Run :class:`StdDevUDF` on ``ctx`` (over ``roi``, default :meth:`get_sd_roi`);
        ``(roi, consolidate_result(...))``."""
        roi = self.get_sd_roi() if roi is None else roi
        res = ctx.run_udf(dataset=self.dataset, udf=StdDevUDF(), roi=roi, progress=progress,
                          corrections=corrections)
        return roi, consolidate_result(res)

    def get_cluster_udf(self, sd_udf_results: dict) -> ApplyMasksUDF:
        """An :class:`ApplyMasksUDF` reading one pixel per peak of ``sd_udf_results["std"]``, sparse float32
        masks as LiberTEM's."""
        import sparse
        from skimage.feature import peak_local_max

        p = self.parameters
        sstd = _array(sd_udf_results["std"])
        h, w = sstd.shape
        if all(p.get(k) is not None for k in ("cy", "cx", "ri", "ro")):
            cy, cx, ri, ro = (float(p[k]) for k in ("cy", "cx", "ri", "ro"))
            ring = 1 * _make_circular_mask(cx, cy, w, h, ro) - 1 * _make_circular_mask(cx, cy, w, h, ri)
            sstd = sstd * ring
        peaks = peak_local_max(sstd, num_peaks=p["n_peaks"], min_distance=p["min_dist"])
        n = len(peaks)
        coords = np.stack((np.arange(n), peaks[:, 0], peaks[:, 1]), axis=0)
        stack = sparse.COO(coords=coords, data=1., shape=(n,) + self.sig_shape)
        return ApplyMasksUDF(mask_factories=lambda: stack, mask_count=n, mask_dtype=np.float32, use_sparse=True)

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        """Cluster the frames by the cluster UDF's ``intensity`` (one column per peak, each scaled by its
        mean absolute value); result ``intensity``, nav-shaped labels from 1."""
        from sklearn.cluster import AgglomerativeClustering
        from sklearn.feature_extraction.image import grid_to_graph

        from raytile.viz.images import visualize_simple

        nav = self.nav_shape
        if len(nav) != 2:
            raise AnalysisParameterError(f"ClusterAnalysis needs two navigation dimensions, the nav shape is {nav}")
        features = np.asarray(udf_results["intensity"].raw_data)
        features = features / np.abs(features).mean(axis=0)
        connectivity = grid_to_graph(n_x=nav[0], n_y=nav[1])  # rows first, as LiberTEM passes them
        clustering = AgglomerativeClustering(metric="euclidean", n_clusters=self.parameters["n_clust"],
                                             linkage="ward", connectivity=connectivity).fit(features)
        labels = np.array(clustering.labels_ + 1).reshape(nav)
        return AnalysisResultSet([
            AnalysisResult(labels, lambda: visualize_simple(labels, damage=damage), key="intensity",
                           title="intensity", desc="Labels for the clustering"),
        ])

    def run_on(self, ctx: Any, roi: Any = None, progress: Any = False, corrections: Any = None) -> AnalysisResultSet:
        """Both runs on ``ctx`` (what ``ctx.run(analysis)`` does): the standard deviation over ``roi``
        (default :meth:`get_sd_roi`), then the cluster UDF over every frame."""
        _, sd = self.run_sd(ctx, roi=roi, progress=progress, corrections=corrections)
        res = ctx.run_udf(dataset=self.dataset, udf=self.get_cluster_udf(sd), progress=progress,
                          corrections=corrections)
        return self.get_udf_results(res, None, damage=True)

    async def controller(self, cancel_id: Any, executor: Any, job_is_cancelled: Callable[[], bool],
                         send_results: Callable[[AnalysisResultSet, bool], Awaitable[Any]]) -> None:
        """LiberTEM's web GUI entry: both runs on ``executor`` (a raytile Context, or an
        :class:`~raytile.executor.base.AsyncAdapter`), then ``await send_results(results, True)``.
        ``job_is_cancelled()`` is asked after each run; True raises ``UDFRunCancelled``."""
        ctx = _sync_context(executor)
        _, sd = await asyncio.to_thread(self.run_sd, ctx)
        if job_is_cancelled():
            raise UDFRunCancelled(f"ClusterAnalysis {cancel_id}: cancelled after the standard deviation run")
        res = await asyncio.to_thread(ctx.run_udf, dataset=self.dataset, udf=self.get_cluster_udf(sd))
        if job_is_cancelled():
            raise UDFRunCancelled(f"ClusterAnalysis {cancel_id}: cancelled after the cluster run")
        results = await asyncio.to_thread(self.get_udf_results, res, None, True)
        await send_results(results, True)
