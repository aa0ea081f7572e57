"""`Context`: the entry point. Loads data sets and runs UDFs on an executor."""

from __future__ import annotations

import os
from typing import Awaitable, Callable, Iterable, Literal, Sequence, overload

from raytile.analysis.api import AnalysisMethods
from raytile.common.errors import ConfigValidationError, ExecutorError
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, RoiLike
from raytile.io.formats import get_format
from raytile.runtime import tracing
from raytile.runtime.executor import Executor
from raytile.runtime.notebook import NotebookMethods, dry_run_results
from raytile.runtime.host import DriverHost, RunHost, choose_coordinator
from raytile.runtime.host_factories import make_host
from raytile.runtime.plan import make_plan
from raytile.runtime.plots import PlotsSpec, PlottedRun
from raytile.runtime.progress import ProgressReporter, TqdmProgressReporter
from raytile.runtime.run import UDFRun
from raytile.runtime.results import ResultBuffer, UDFResults
from raytile.udf.base import UDF

__all__ = ["Context", "ResultDict"]

#: One UDF's results by buffer name, as ``run_udf`` returns them.
ResultDict = dict[str, ResultBuffer]


class Context(AnalysisMethods, NotebookMethods):
    """Loads data sets and runs UDFs on them.

    >>> ctx = Context()                      # local Ray (started if none is running)
    >>> ctx = Context(executor="inline")     # no Ray, everything in this process
    >>> ds = ctx.load("npy", path="scan.npy")
    >>> res = ctx.run_udf(dataset=ds, udf=SumUDF())
    >>> res["intensity"].data

    ``coordinator`` says where runs are coordinated (their results merged):
    ``"driver"``, a thread of this process, or ``"actor"``, an actor on the
    Ray cluster, so that only snapshots travel to this process, other
    processes can :meth:`attach` to a run, and a run may outlive this process
    (``run_udf_iter(..., detached=True)``). ``"auto"`` (default) picks
    ``"actor"`` for Ray Client (``ray://``) addresses, else ``"driver"``.
    See docs/coordinator.md.

    LiberTEM's Analysis API (``ctx.run(ctx.create_ring_analysis(...))``)
    comes from :class:`~raytile.analysis.api.AnalysisMethods`; ``map``,
    ``export_dataset``, ``display`` and ``make_with`` from
    :class:`~raytile.runtime.notebook.NotebookMethods`.
    """

    def __init__(self, executor: str | Executor = "ray", coordinator: str = "auto", **executor_kwargs: object):
        coordinator = choose_coordinator(coordinator, executor, executor_kwargs.get("address"))
        self._host: RunHost
        if isinstance(executor, Executor):
            self._host = DriverHost(executor)
        else:  # registered by the layer that provides it (raytile.actors for "ray")
            self._host = make_host(executor, coordinator, **executor_kwargs)

    @property
    def executor(self) -> Executor:
        """The executor whose workers run this Context's tasks (``coordinator="driver"`` only)."""
        if not isinstance(self._host, DriverHost):
            raise ExecutorError("this Context's executor lives in its coordinator actor on the cluster "
                                "(coordinator='actor'); use Context.num_workers or Context.workers")
        return self._host.executor

    @property
    def coordinator(self) -> str:
        """Where this Context coordinates its runs: ``"driver"`` or ``"actor"``."""
        return self._host.coordinator

    @property
    def num_workers(self) -> int:
        """Worker slots this Context runs tasks on."""
        return self._host.num_workers

    @property
    def workers(self) -> list[dict]:
        """What the workers said about themselves (name, kind, pid, host, node); empty inline."""
        return self._host.workers

    @classmethod
    def make_local(cls, cpus: int | None = None, gpus: int | None = None, coordinator: str = "auto",
                   **kwargs: object) -> "Context":
        """A Context on a private local Ray instance with ``cpus`` CPU workers and ``gpus`` GPU workers.

        It never joins a Ray cluster already running on this machine (use
        :meth:`connect` for that); if this process already joined Ray, that
        instance is used.

        >>> ctx = Context.make_local(cpus=4, gpus=1)
        """
        return cls("ray", coordinator, cpus=cpus, gpus=gpus, address="local", **kwargs)

    @classmethod
    def connect(cls, address: str = "auto", max_workers: int | None = None, min_workers: int | None = None,
                coordinator: str = "auto", **kwargs: object) -> "Context":
        """A Context on an existing Ray cluster (``"auto"``, ``"host:6379"`` or ``"ray://host:10001"``).

        Its workers follow the cluster: one per CPU and per GPU of every node,
        nodes that join later included, at most ``max_workers``. With
        ``min_workers`` it asks the cluster's autoscaler for that many CPUs.

        >>> ctx = Context.connect("auto", max_workers=64)
        """
        return cls("ray", coordinator, address=address, max_workers=max_workers, min_workers=min_workers, **kwargs)

    def close(self) -> None:
        """Release the workers; runs in flight are cancelled, except detached ones."""
        self._host.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- data ----------------------------------------------------------------
    def load(self, format: str, *args: object, **kwargs: object) -> DataSet:
        """Open a data set: ``format`` is "memory", "raw", "npy", ... and args/kwargs its parameters
        (positional ones in the order of the format's constructor, as LiberTEM takes them)."""
        open_format: Callable[..., DataSet] = get_format(format)  # the format checks its own parameters
        ds = open_format(*args, **_absolute_paths(kwargs))
        ds.initialize(self._host)
        self._host.prepare_dataset(ds)
        return ds

    # -- running -------------------------------------------------------------
    def run_udf_iter(
        self,
        dataset: DataSet,
        udf: UDF | Sequence[UDF],
        roi: RoiLike = None,
        corrections: CorrectionSet | None = None,
        backends: Iterable[str] | None = None,
        progress: bool | ProgressReporter = False,
        sync: bool = True,
        detached: bool = False,
        plots: PlotsSpec = None,
    ) -> UDFRun | PlottedRun:
        """Start a run; iterate the returned :class:`UDFRun` for partial results.

        ``for part in ctx.run_udf_iter(...)`` or, in async code,
        ``async for part in ctx.run_udf_iter(..., sync=False)``. ``plots``: live
        plots fed with each partial result (see :meth:`run_udf`).

        With ``detached=True`` (``coordinator="actor"`` only) the run goes on
        when this process leaves the loop or exits; any process on the
        cluster can :meth:`attach` to ``run.run_id`` for its results.
        """
        if not isinstance(detached, bool):
            raise ConfigValidationError(f"detached must be True or False, got {detached!r}")
        if not isinstance(sync, bool):
            raise ConfigValidationError(f"sync must be True or False, got {sync!r}")
        if plots:  # live plots (raytile.runtime.plots), as LiberTEM's plots=
            from raytile.runtime.plots import run_iter_with_plots

            return run_iter_with_plots(self, plots, dataset, udf, roi=roi, corrections=corrections,
                                       backends=backends, progress=progress, sync=sync, detached=detached)
        return self._start(dataset, udf, roi, corrections, backends, progress, final_only=False, detached=detached,
                           sync=sync)

    def attach(self, run_id: str) -> UDFRun:
        """Another viewer of a live run started with ``coordinator="actor"``, here or in any process
        connected to the same cluster: iterate it for the run's partial results (latest wins for
        each viewer). Leaving the loop leaves the run going; ``cancel()`` stops it for everyone.

        >>> run = ctx.attach(run_id)
        >>> for part in run: show(part.buffers[0]["intensity"].data)
        """
        source, _udfs = self._host.attach(run_id)
        return UDFRun(source, cancel_on_leave=False)

    def runs(self) -> list[dict]:
        """The runs on the cluster that :meth:`attach` can reach (``coordinator="actor"`` only; empty
        otherwise): ``run_id``, ``udfs``, ``detached``, ``over``, ``viewers``, ``coordinator``.

        >>> [r["run_id"] for r in ctx.runs() if r["detached"] and not r["over"]]
        """
        return self._host.list_runs()

    def _start(self, dataset: DataSet, udf: UDF | Sequence[UDF], roi: RoiLike, corrections: CorrectionSet | None,
               backends: Iterable[str] | None,
               progress: bool | ProgressReporter, final_only: bool, detached: bool = False,
               sync: bool = True) -> UDFRun:
        progress = self._prepare_run(dataset, progress)
        span = tracing.start_span("raytile.run")
        try:
            with tracing.use_span(span), tracing.child_span("raytile.plan"):
                plan = make_plan(dataset, udf, roi=roi, corrections=corrections, backends=backends,
                                 device_classes=self._host.device_classes)
            span.set_attribute("raytile.udfs", ",".join(type(u).__name__ for u in plan.udfs))
            source = self._host.start(plan, _reporter(progress), final_only, detached, span=span)
        except BaseException as e:
            tracing.record_error(span, e)
            span.end()
            raise
        return UDFRun(source, cancel_on_leave=not detached, sync=sync, frames_dropped=dataset.frames_dropped)

    # run_udf's result follows its arguments: one UDF's dict or a list of them, awaitable with sync=False
    @overload
    def run_udf(self, dataset: DataSet, udf: UDF, roi: RoiLike = ..., corrections: CorrectionSet | None = ...,
                backends: Iterable[str] | None = ..., progress: bool | ProgressReporter = ...,
                sync: Literal[True] = ..., plots: PlotsSpec = ...) -> ResultDict: ...
    @overload
    def run_udf(self, dataset: DataSet, udf: Sequence[UDF], roi: RoiLike = ..., corrections: CorrectionSet | None = ...,
                backends: Iterable[str] | None = ..., progress: bool | ProgressReporter = ...,
                sync: Literal[True] = ..., plots: PlotsSpec = ...) -> list[ResultDict]: ...
    @overload
    def run_udf(self, dataset: DataSet, udf: UDF, roi: RoiLike = ..., corrections: CorrectionSet | None = ...,
                backends: Iterable[str] | None = ..., progress: bool | ProgressReporter = ..., *,
                sync: Literal[False], plots: PlotsSpec = ...) -> Awaitable[ResultDict]: ...
    @overload
    def run_udf(self, dataset: DataSet, udf: Sequence[UDF], roi: RoiLike = ..., corrections: CorrectionSet | None = ...,
                backends: Iterable[str] | None = ..., progress: bool | ProgressReporter = ..., *,
                sync: Literal[False], plots: PlotsSpec = ...) -> Awaitable[list[ResultDict]]: ...

    def run_udf(
        self,
        dataset: DataSet,
        udf: UDF | Sequence[UDF],
        roi: RoiLike = None,
        corrections: CorrectionSet | None = None,
        backends: Iterable[str] | None = None,
        progress: bool | ProgressReporter = False,
        sync: bool = True,
        plots: PlotsSpec = None,
    ) -> ResultDict | list[ResultDict] | Awaitable[ResultDict | list[ResultDict]]:
        """Run UDFs over the data set; one read of each tile serves all of them.

        Returns ``{name: ResultBuffer}`` for one UDF, a list of such dicts for
        a list of UDFs. With ``sync=False`` returns an awaitable of the same.
        ``plots``: live plots updated while the run goes on, as LiberTEM's
        (``True``, channel lists, or plot objects; see raytile.runtime.plots).
        """
        try:
            if plots:
                from raytile.runtime.plots import run_with_plots

                return run_with_plots(self, plots, dataset, udf, roi=roi, corrections=corrections,
                                      backends=backends, progress=progress, sync=sync)
            single = isinstance(udf, UDF)
            run = self._start(dataset, udf, roi, corrections, backends, progress, final_only=True)
            if sync:
                return _unpack(run.result(), single)

            async def _await() -> ResultDict | list[ResultDict]:
                return _unpack(await run.aresult(), single)

            return _await()
        finally:
            self._run_udf_returned(dataset)

    # -- what a subclass adds around a run (LiveContext: raytile.live.api) ----------
    def _prepare_run(self, dataset: DataSet, progress: bool | ProgressReporter) -> bool | ProgressReporter:
        """Called as every run starts on ``dataset`` (``run_udf``, ``run_udf_iter``, with plots or not);
        returns the progress to report to. Here: ``progress`` as it is."""
        return progress

    def _run_udf_returned(self, dataset: DataSet) -> None:
        """Called when ``run_udf`` returns or raises (with ``sync=False``: once it returned the
        awaitable). Here: nothing."""

    @overload
    def dry_run(self, dataset: DataSet, udf: UDF, roi: RoiLike = ...) -> ResultDict: ...
    @overload
    def dry_run(self, dataset: DataSet, udf: Sequence[UDF], roi: RoiLike = ...) -> list[ResultDict]: ...

    def dry_run(self, dataset: DataSet, udf: UDF | Sequence[UDF], roi: RoiLike = None) -> ResultDict | list[ResultDict]:
        """Check a run without reading data: the result buffers as they would come back (empty)."""
        return _unpack(dry_run_results(dataset, udf, roi, self._host.device_classes), isinstance(udf, UDF))


#: Parameters of the formats that name local files (one path, or a list of them).
PATH_PARAMS = ("path", "files", "gain_map_path")


def _absolute_paths(kwargs: dict[str, object]) -> dict[str, object]:
    """``kwargs`` with relative local paths made absolute against this process's working folder: Ray
    workers run in folders of their own, where ``path="scan.raw"`` named nothing ("file not found"
    from the first worker that opened it). URLs (``s3://...``) and absolute paths stay as they are."""

    def absolute(p: object) -> object:
        if isinstance(p, (str, os.PathLike)) and "://" not in os.fspath(p) and not os.path.isabs(p):
            return os.path.abspath(p)
        return p

    out = dict(kwargs)
    for name in PATH_PARAMS:
        value = out.get(name)
        if isinstance(value, (list, tuple)):
            out[name] = type(value)(absolute(v) for v in value)
        elif value is not None:
            out[name] = absolute(value)
    return out


def _reporter(progress: bool | ProgressReporter) -> ProgressReporter | None:
    if isinstance(progress, ProgressReporter):
        return progress
    return TqdmProgressReporter() if progress else None


def _unpack(results: UDFResults, single: bool) -> ResultDict | list[ResultDict]:
    return results.buffers[0] if single else list(results.buffers)
