"""`NotebookMethods`: the Context methods LiberTEM's notebooks call besides ``run_udf``.

``ctx.map(dataset=, f=)`` runs a function of one frame over the data set
(:class:`~raytile.udf.AutoUDF`); ``ctx.export_dataset(ds, path=)`` writes it
to ``.npy`` (:class:`~raytile.udf.RecordUDF`) with LiberTEM's errors;
``ctx.display(ds, udf)`` shows what a UDF would compute on a data set as an
HTML table in Jupyter; ``Context.make_with(...)`` takes LiberTEM's executor
names (see :data:`EXECUTOR_NAMES`).

>>> ctx = Context.make_with("inline")
>>> ctx.map(dataset=ds, f=np.sum).data.shape == tuple(ds.shape.nav)
True
"""

from __future__ import annotations

import html
import os
import pathlib
import warnings
from typing import Any, Iterable

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.dataset import DataSet
from raytile.udf.auto import AutoUDF
from raytile.udf.base import UDF
from raytile.udf.record import RecordUDF

__all__ = ["NotebookMethods", "UDFInfo", "EXECUTOR_NAMES", "context_kwargs_for", "dry_run_results"]

#: LiberTEM's executor names and the executor raytile gives for each. "dask", "threads" and
#: "pipelined" all become a local Ray (one worker per CPU, or ``cpus``/``gpus``): raytile has one
#: parallel executor. What differs: LiberTEM's "threads" shares the process's memory and
#: "pipelined" keeps workers on fixed partitions; Ray workers are processes fed tiles through its
#: object store, and a partition goes to whichever worker is free.
EXECUTOR_NAMES: dict[str, str] = {
    "inline": "inline", "synchronous": "inline",
    "dask": "ray", "threads": "ray", "pipelined": "ray", "dask-make-default": "ray",
}
_UNSUPPORTED = {
    "dask-integration": "raytile has no Dask scheduler to join; use Context.connect('auto') for a Ray cluster",
    "delayed": "raytile computes eagerly; there is no dask.delayed executor",
}


def _count(resource: int | Iterable[int] | None, name: str) -> int | None:
    """LiberTEM takes a count or a list of device ids; raytile needs a count."""
    if resource is None or isinstance(resource, int):
        return resource
    try:
        return len(list(resource))
    except TypeError:
        raise ConfigValidationError(f"{name} must be an int or a list of device ids, got {resource!r}") from None


def context_kwargs_for(executor_spec: str, cpus: Any = None, gpus: Any = None) -> dict[str, Any]:
    """The ``Context(...)`` keyword arguments for LiberTEM's ``make_with(executor_spec, cpus=, gpus=)``."""
    if executor_spec in _UNSUPPORTED:
        raise ConfigValidationError(f"executor_spec={executor_spec!r} is not supported: {_UNSUPPORTED[executor_spec]}")
    if executor_spec not in EXECUTOR_NAMES:
        raise ConfigValidationError(f"unknown executor_spec={executor_spec!r}; known: "
                                    f"{', '.join(sorted(EXECUTOR_NAMES))}")
    if EXECUTOR_NAMES[executor_spec] == "inline":
        return {"executor": "inline"}
    return {"executor": "ray", "address": "local", "cpus": _count(cpus, "cpus"), "gpus": _count(gpus, "gpus")}


class UDFInfo:
    """What a UDF computes on a data set, shown as HTML in Jupyter (``ctx.display(ds, udf)``).

    ``buffers``: name -> (kind, extra_shape, concrete shape, dtype) of the
    results the user gets back (private buffers left out).
    """

    def __init__(self, title: str, method: str, backends: tuple[str, ...], input_dtype: np.dtype,
                 buffers: dict[str, tuple[str, tuple[int, ...], tuple[int, ...], np.dtype]]):
        self.title = title
        self.method = method
        self.backends = backends
        self.input_dtype = input_dtype
        self.buffers = buffers

    def _repr_html_(self) -> str:
        def e(obj: Any) -> str:
            return html.escape(str(obj))

        rows = "\n".join(f"<tr><td>{e(name)}</td><td>{e(kind)}</td><td>{e(extra)}</td><td>{e(shape)}</td>"
                         f"<td>{e(dtype)}</td></tr>" for name, (kind, extra, shape, dtype) in self.buffers.items())
        return (f"<h2>{e(self.title)}</h2><h3>General</h3><table><tbody>"
                f"<tr><th>Processing method</th><td>{e(self.method)}</td></tr>"
                f"<tr><th>Compute Backends</th><td>{e(', '.join(self.backends))}</td></tr>"
                f"<tr><th>Preferred input dtype</th><td>{e(self.input_dtype)}</td></tr></tbody></table>"
                "<h3>Result types</h3><p>Note: these may vary with different data sets</p><table><thead>"
                "<th>Name</th><th>Kind</th><th>Extra Shape</th><th>Concrete Shape</th><th>dtype</th></thead>"
                f"<tbody>{rows}</tbody></table>")

    def __repr__(self) -> str:
        return f"<UDFInfo {self.title}: {', '.join(self.buffers)}>"


class NotebookMethods:
    """``map``, ``export_dataset``, ``display`` and ``make_with`` of :class:`raytile.Context` (a mixin)."""

    run_udf: Any
    dry_run: Any
    _plot_class: Any = None

    @property
    def plot_class(self) -> type:
        """The class of the plots ``run_udf(..., plots=True)`` makes (default
        :class:`~raytile.viz.mpl.MPLLive2DPlot`; e.g. :class:`~raytile.viz.bqp.BQLive2DPlot` in Jupyter)."""
        if self._plot_class is None:
            from raytile.runtime.plots import default_plot_class

            return default_plot_class()
        return self._plot_class

    @plot_class.setter
    def plot_class(self, value: type) -> None:
        self._plot_class = value

    @classmethod
    def make_with(cls, executor_spec: str = "dask", *, cpus: int | Iterable[int] | None = None,
                  gpus: int | Iterable[int] | None = None, plot_class: Any = None,
                  snooze_timeout: float | None = None, main_process_gpu: Any = None) -> Any:
        """A Context for one of LiberTEM's executor names (see :data:`EXECUTOR_NAMES`).

        "inline"/"synchronous" run in this process; "dask", "threads",
        "pipelined" and "dask-make-default" start a local Ray with ``cpus``
        CPU and ``gpus`` GPU workers (counts, or lists of device ids whose
        length counts). ``snooze_timeout`` and ``main_process_gpu`` are
        accepted and have no effect (Ray's idle workers hold no threads
        busy; the main process never computes on a GPU here).

        >>> ctx = Context.make_with("inline")
        """
        ctx = cls(**context_kwargs_for(executor_spec, cpus, gpus))
        if plot_class is not None:
            ctx.plot_class = plot_class
        return ctx

    def map(self, dataset: DataSet, f: Any, roi: Any = None, progress: Any = False, corrections: Any = None,
            backends: Any = None) -> Any:
        """Run ``f`` (a function of one frame, returning a small array or a number) on every frame.

        Returns the ``result`` buffer: ``.data`` shaped ``nav + shape of f's result``.

        >>> ctx.map(dataset=ds, f=lambda frame: frame.max()).data
        """
        res = self.run_udf(dataset=dataset, udf=AutoUDF(f=f), roi=roi, progress=progress, corrections=corrections,
                           backends=backends)
        return res["result"]

    def export_dataset(self, dataset: DataSet, *, path: str | os.PathLike, progress: bool = False,
                       overwrite: bool = False, format: str | None = None,
                       storage_options: dict[str, Any] | None = None, compressor: str | None = "zstd",
                       roi: Any = None) -> None:
        """Write the data set to ``path``, in its shape and dtype: ``.npy`` (as LiberTEM), or a Zarr v3
        array with ``format="zarr"`` (or a path ending in ``.zarr``).

        Zarr: ``path`` a directory or an object store URL (``s3://bucket/scan.zarr``, with
        ``storage_options``); one chunk per frame, ``compressor`` ``"zstd"``, ``"blosc"`` or None;
        written in parallel by the workers (see :mod:`raytile.runtime.zarr_export`); ``roi`` writes
        only its frames. ``.npy``: raises ``ValueError`` for another suffix and ``FileExistsError`` for
        an existing file unless ``overwrite=True``. Local targets need a file system the workers share.
        """
        if format not in (None, "npy", "zarr"):
            raise ConfigValidationError(f"export_dataset: format must be 'npy' or 'zarr', got {format!r}")
        if format == "zarr" or (format is None and os.fspath(path).rstrip("/").endswith(".zarr")):
            from raytile.runtime.zarr_export import export_zarr

            export_zarr(self, dataset, path, storage_options, overwrite=overwrite, compressor=compressor,
                        progress=progress, roi=roi)
            return
        target = pathlib.Path(path)
        if target.suffix != ".npy":
            raise ValueError(f"Unrecognized file extension {target.suffix} only .npy is currently supported.")
        if not overwrite and target.is_file():
            raise FileExistsError(f"Cannot export dataset to existing path {target} .Use overwrite=True to force "
                                  "export.")
        self.run_udf(dataset=dataset, udf=RecordUDF(target), progress=progress)

    def display(self, dataset: DataSet, udf: UDF, roi: Any = None) -> UDFInfo:
        """What ``udf`` would compute on ``dataset``: method, backends, input dtype and result buffers.

        Jupyter shows it as HTML tables; nothing is read from the data set.
        """
        from raytile.runtime.plan import make_plan

        plan = make_plan(dataset, udf, roi=roi)
        planned = plan.udfs[0]
        declared = planned.get_result_buffers()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shapes = {name: buf.data.shape for name, buf in self.dry_run(dataset, udf, roi=roi).items()}
        buffers: dict[str, tuple[str, tuple[int, ...], tuple[int, ...], np.dtype]] = {
            name: (str(buf.kind), buf.extra_shape, tuple(shapes.get(name, ())), np.dtype(buf.dtype))
            for name, buf in declared.items() if buf.use != "private"}
        return UDFInfo(type(udf).__name__, str(planned.get_method()), tuple(planned.get_backends()),
                       np.dtype(plan.params.input_dtype), buffers)


def dry_run_results(dataset: DataSet, udfs: Any, roi: Any = None, device_classes: Iterable[str] = ("cpu",)) -> Any:
    """The results a run would return, empty (nothing read): shapes, kinds, dtypes (``Context.dry_run``)."""
    from raytile.runtime.plan import make_plan
    from raytile.runtime.results import ResultAccumulator

    plan = make_plan(dataset, udfs, roi=roi, device_classes=device_classes)
    acc = ResultAccumulator([u.copy() for u in plan.udfs], plan.params.dataset_shape, plan.params.roi,
                            plan.metas(), plan.partition_offsets, plan.total_partitions)
    return acc.snapshot(finished=False)


def _register_dry_run() -> None:
    from raytile.viz import live

    live.dry_run = dry_run_results


_register_dry_run()
