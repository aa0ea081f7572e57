"""`Analysis`: a UDF together with what turns its result into an :class:`AnalysisResultSet`.

An Analysis makes one of raytile's UDFs (:meth:`Analysis.get_udf`), maybe a
ROI (:meth:`Analysis.get_roi`), and converts the UDF's results
(:meth:`Analysis.get_udf_results`). ``Context.run(analysis)`` runs the UDF
like any other run (on Ray or inline); async code takes the same steps
itself, as LiberTEM's documentation shows::

    udf = analysis.get_udf()
    roi = analysis.get_roi()
    res = await ctx.run_udf(dataset=ds, udf=udf, roi=roi, sync=False)
    result = analysis.get_udf_results(res, roi, damage=True)

Parameters follow LiberTEM: ``get_parameters`` gives the defaults, the
parameters passed override them and are kept in ``self.parameters``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.common.sparse import is_sparse, to_dense, to_sparse
from raytile.io.dataset import DataSet
from raytile.udf.base import UDF

__all__ = ["Analysis", "BaseAnalysis", "roi_from_parameters", "dense_roi", "IncompatibleDataSet",
           "AnalysisParameterError"]


class IncompatibleDataSet(DataSetException, ValueError):
    """The data set's shape does not suit the analysis (a ValueError, as LiberTEM raises)."""


class AnalysisParameterError(ConfigValidationError, ValueError):
    """Parameters of an analysis that do not go together (a ValueError, as LiberTEM raises)."""


def roi_from_parameters(parameters: dict, nav_shape: tuple[int, ...]) -> np.ndarray | None:
    """A ROI described in ``parameters["roi"]`` (LiberTEM's GUI form: a ``disk`` or a ``rect``), or None.

    >>> roi_from_parameters({"roi": {"shape": "rect", "x": 0, "y": 0, "width": 1, "height": 1}}, (3, 3)).sum()
    np.int64(4)
    """
    from raytile import masks

    spec = parameters.get("roi")
    if not spec or "shape" not in spec:
        return None
    ny, nx = tuple(nav_shape)
    if spec["shape"] == "disk":
        return masks.circular(spec["cx"], spec["cy"], nx, ny, spec["r"])
    if spec["shape"] == "rect":
        return masks.rectangular(spec["x"], spec["y"], spec["width"], spec["height"], nx, ny)
    raise ValueError(f"unknown ROI shape {spec['shape']!r}: use 'disk' or 'rect'")


def dense_roi(roi: Any, nav_shape: tuple[int, ...]) -> np.ndarray | None:
    """A ROI in any form LiberTEM accepts (bool array, sparse array, coordinates) as a bool nav-shaped array."""
    if roi is None:
        return None
    if isinstance(roi, (tuple, list)) and roi and not isinstance(roi[0], (list, np.ndarray, bool, np.bool_)):
        roi = to_sparse(roi, shape=nav_shape)
    if is_sparse(roi):
        roi = to_dense(roi)
    arr = np.asarray(roi)
    return arr.reshape(nav_shape) if arr.size == int(np.prod(nav_shape)) else arr


class Analysis:
    """The interface: a UDF to run, its ROI, and the conversion of its results.

    A subclass may register under a name, as LiberTEM's: ``class MyAnalysis(BaseAnalysis, id_="MINE")``
    puts it in :attr:`registry`, and ``Analysis.get_analysis_by_type("MINE")`` finds it (the built-in
    analyses have LiberTEM's names: ``"SUM_FRAMES"``, ``"FEM"``, ``"CLUST"``, ...).
    """

    TYPE = "UDF"
    #: registered analyses by name (``id_``), shared by all subclasses
    registry: dict[str, type["Analysis"]] = {}

    def __init__(self, dataset: DataSet, parameters: dict):
        self.dataset = dataset

    def __init_subclass__(cls, id_: str | None = None, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if id_ is not None:
            cls.registry[id_] = cls

    @classmethod
    def get_analysis_by_type(cls, id_: str) -> type["Analysis"]:
        """The analysis registered as ``id_`` (KeyError if none is)."""
        return cls.registry[id_]

    def get_udf(self) -> UDF:
        """The UDF this analysis runs."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_udf()")

    def get_roi(self) -> Any:
        """The ROI the UDF runs on (None: every frame)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_roi()")

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        """The UDF's results (``{name: buffer}``, as ``run_udf`` returns them) as an :class:`AnalysisResultSet`.

        ``damage`` marks the nav positions that count for the pictures'
        colour scales: True (all), or the ROI as a bool array.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement get_udf_results()")

    def get_parameters(self, parameters: dict) -> dict:
        """The analysis' parameters with defaults filled in."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_parameters()")

    def need_rerun(self, old_params: dict, new_params: dict) -> bool:
        """Whether a change of parameters needs the UDF to run again (or only new pictures)."""
        return True


class BaseAnalysis(Analysis):
    """An Analysis with ``self.parameters`` = defaults updated by the given parameters, and no ROI."""

    def __init__(self, dataset: DataSet, parameters: dict):
        super().__init__(dataset, parameters)
        self.parameters = self.get_parameters(parameters)
        self.parameters.update(parameters)

    def get_parameters(self, parameters: dict) -> dict:
        return dict(parameters)

    def get_roi(self) -> Any:
        return None

    @property
    def sig_shape(self) -> tuple[int, ...]:
        return tuple(self.dataset.shape.sig.to_tuple())

    @property
    def nav_shape(self) -> tuple[int, ...]:
        return tuple(self.dataset.shape.nav.to_tuple())

    def get_complex_results(self, job_result: np.ndarray, key_prefix: str, title: str, desc: str, damage: Any,
                            default_lin: bool = True) -> list[AnalysisResult]:
        """The six results LiberTEM gives for complex data: magnitude (lin and log), real, imag, angle, complex."""
        from raytile.viz.images import rgb_from_2dvector, visualize_simple

        damage = np.asarray(damage) & np.isfinite(job_result)
        magn = np.abs(job_result)
        angle = np.angle(job_result)
        vmax = float(np.max(magn[damage])) if np.any(damage) else 1.0
        lin_key, log_key = (key_prefix, f"{key_prefix}_log") if default_lin else (f"{key_prefix}_lin", key_prefix)

        def picture(data: np.ndarray, log: bool = False) -> Any:
            return lambda: visualize_simple(data, logarithmic=log, damage=damage)

        return [
            AnalysisResult(magn, picture(magn), f"{title} [magn]", f"{desc} [magn]", lin_key),
            AnalysisResult(magn, picture(magn, True), f"{title} [log(magn)]", f"{desc} [log(magn)]", log_key),
            AnalysisResult(job_result.real, picture(job_result.real), f"{title} [real]", f"{desc} [real]",
                           f"{key_prefix}_real"),
            AnalysisResult(job_result.imag, picture(job_result.imag), f"{title} [imag]", f"{desc} [imag]",
                           f"{key_prefix}_imag"),
            AnalysisResult(angle, picture(angle), f"{title} [angle]", f"{desc} [angle]", f"{key_prefix}_angle"),
            AnalysisResult(job_result, lambda: rgb_from_2dvector(x=job_result.real, y=job_result.imag, vmax=vmax),
                           f"{title} [complex]", f"{desc} [complex]", f"{key_prefix}_complex"),
        ]
