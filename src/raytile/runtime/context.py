"""`Context`: the entry point. Loads data sets and runs UDFs on an executor."""

from __future__ import annotations

from typing import Any, Iterable

from raytile.common.errors import ExecutorError
from raytile.io.dataset import DataSet
from raytile.io.formats import get_format
from raytile.runtime import tracing
from raytile.runtime.coordinator import Coordinator
from raytile.runtime.executor import Executor
from raytile.runtime.plan import make_plan
from raytile.runtime.progress import ProgressReporter, TqdmProgressReporter
from raytile.runtime.run import UDFRun
from raytile.runtime.results import ResultBuffer, UDFResults
from raytile.udf.base import UDF

__all__ = ["Context"]


class Context:
    """Loads data sets and runs UDFs on them.

    >>> ctx = Context()                      # local Ray (started if none is running)
    >>> ctx = Context(executor="inline")     # no Ray, everything in this process
    >>> ds = ctx.load("npy", path="scan.npy")
    >>> res = ctx.run_udf(dataset=ds, udf=SumUDF())
    >>> res["intensity"].data
    """

    def __init__(self, executor: str | Executor = "ray", **executor_kwargs: Any):
        if isinstance(executor, Executor):
            self.executor = executor
        elif executor == "inline":
            from raytile.runtime.inline import InlineExecutor

            self.executor = InlineExecutor()
        elif executor == "ray":
            from raytile.actors.executor import RayExecutor

            self.executor = RayExecutor.make(**executor_kwargs)
        else:
            raise ExecutorError(f"unknown executor {executor!r}; use 'ray', 'inline' or an Executor instance")

    @classmethod
    def make_local(cls, cpus: int | None = None, gpus: int | None = None, **kwargs: Any) -> "Context":
        """A Context on a private local Ray instance with ``cpus`` CPU workers and ``gpus`` GPU workers.

        It never joins a Ray cluster already running on this machine (use
        :meth:`connect` for that); if this process already joined Ray, that
        instance is used.

        >>> ctx = Context.make_local(cpus=4, gpus=1)
        """
        return cls(executor="ray", cpus=cpus, gpus=gpus, address="local", **kwargs)

    @classmethod
    def connect(cls, address: str = "auto", max_workers: int | None = None, min_workers: int | None = None,
                **kwargs: Any) -> "Context":
        """A Context on an existing Ray cluster (``"auto"``, ``"host:6379"`` or ``"ray://host:10001"``).

        Its workers follow the cluster: one per CPU and per GPU of every node,
        nodes that join later included, at most ``max_workers``. With
        ``min_workers`` it asks the cluster's autoscaler for that many CPUs.

        >>> ctx = Context.connect("auto", max_workers=64)
        """
        return cls(executor="ray", address=address, max_workers=max_workers, min_workers=min_workers, **kwargs)

    def close(self) -> None:
        self.executor.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- data ----------------------------------------------------------------
    def load(self, format: str, **kwargs: Any) -> DataSet:
        """Open a data set: ``format`` is "memory", "raw", "npy", ... and kwargs its parameters."""
        ds = get_format(format)(**kwargs)
        ds.initialize(self.executor)
        self.executor.prepare_dataset(ds)
        return ds

    # -- running -------------------------------------------------------------
    def run_udf_iter(
        self,
        dataset: DataSet,
        udf: Any,
        roi: Any = None,
        corrections: Any = None,
        backends: Iterable[str] | None = None,
        progress: bool | ProgressReporter = False,
        sync: bool = True,
    ) -> UDFRun:
        """Start a run; iterate the returned :class:`UDFRun` for partial results.

        ``for part in ctx.run_udf_iter(...)`` or, in async code,
        ``async for part in ctx.run_udf_iter(..., sync=False)``.
        """
        return self._start(dataset, udf, roi, corrections, backends, progress, final_only=False)

    def _start(self, dataset: DataSet, udf: Any, roi: Any, corrections: Any, backends: Iterable[str] | None,
               progress: bool | ProgressReporter, final_only: bool) -> UDFRun:
        span = tracing.start_span("raytile.run")
        try:
            with tracing.use_span(span), tracing.child_span("raytile.plan"):
                plan = make_plan(dataset, udf, roi=roi, corrections=corrections, backends=backends,
                                 device_classes=self.executor.device_classes)
            span.set_attribute("raytile.udfs", ",".join(type(u).__name__ for u in plan.udfs))
        except BaseException as e:
            tracing.record_error(span, e)
            span.end()
            raise
        coordinator = Coordinator(self.executor, plan, _reporter(progress), span=span, final_only=final_only)
        return UDFRun(coordinator, plan.udfs)

    def run_udf(
        self,
        dataset: DataSet,
        udf: Any,
        roi: Any = None,
        corrections: Any = None,
        backends: Iterable[str] | None = None,
        progress: bool | ProgressReporter = False,
        sync: bool = True,
    ):
        """Run UDFs over the data set; one read of each tile serves all of them.

        Returns ``{name: ResultBuffer}`` for one UDF, a list of such dicts for
        a list of UDFs. With ``sync=False`` returns an awaitable of the same.
        """
        single = isinstance(udf, UDF)
        run = self._start(dataset, udf, roi, corrections, backends, progress, final_only=True)
        if sync:
            return _unpack(run.result(), single)

        async def _await():
            return _unpack(await run.aresult(), single)

        return _await()

    def dry_run(self, dataset: DataSet, udf: Any, roi: Any = None):
        """Check a run without reading data: the result buffers as they would come back (empty)."""
        single = isinstance(udf, UDF)
        plan = make_plan(dataset, udf, roi=roi, device_classes=self.executor.device_classes)
        from raytile.runtime.results import ResultAccumulator

        acc = ResultAccumulator([u.copy() for u in plan.udfs], plan.params.dataset_shape, plan.params.roi,
                                plan.metas(), plan.partition_offsets, plan.total_partitions)
        return _unpack(acc.snapshot(finished=False), single)


def _reporter(progress: bool | ProgressReporter) -> ProgressReporter | None:
    if isinstance(progress, ProgressReporter):
        return progress
    return TqdmProgressReporter() if progress else None


def _unpack(results: UDFResults, single: bool) -> dict[str, ResultBuffer] | list[dict[str, ResultBuffer]]:
    return results.buffers[0] if single else list(results.buffers)
