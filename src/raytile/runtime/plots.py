"""Live plots of a run: ``ctx.run_udf(..., plots=...)`` and ``ctx.run_udf_iter(..., plots=...)``.

``plots`` takes LiberTEM's forms:

- ``True``: one plot per plottable (2D) channel of every UDF, titled
  ``"<UDF>: <channel>"``; a UDF without one gets a warning naming it;
- a list with one list per UDF of channels (``"name"``, ``("name", fn)`` or
  a callable ``fn(udf_results, damage)``);
- a list of plot objects (:class:`~raytile.viz.live.Live2DPlot` subclasses,
  or anything with ``get_udf()`` and ``new_data()``, as LiberTEM takes them)
  made by the caller for the UDF instances passed to the run.

New plots are of ``ctx.plot_class`` (default
:class:`~raytile.viz.mpl.MPLLive2DPlot`). Plots are redrawn from the
consumer's side, never from the workers or the coordinator: a slow plot
only means the coordinator publishes fewer snapshots (latest wins), and a
plot whose ``min_delta`` has not passed is not even handed the data.

The run starts before its plots are made: finding the channels (a dry run:
the empty result buffers from the UDFs' declarations and the data set's
shape, nothing read) and creating the figures (0.2 ms a matplotlib
figure whose Axes wait for its first draw on a non-interactive back-end,
~5 ms with its Axes elsewhere: see raytile/viz/mpl.py) happen while the
workers read the first partitions, instead of before. ``plots`` is checked before the run starts, so a bad argument
starts nothing; a plot that fails to be made cancels the run.

``run_udf`` with plots that cannot show a partial result (matplotlib on Agg
or Jupyter's inline back-end, see
:meth:`~raytile.viz.live.Live2DPlot.shows_partial_results`) runs as it does
without plots: no partial results are made (each worker merges its
partitions and sends them once, at the end), and the plots get the final
data. ``run_udf_iter`` yields partial results whatever the plots.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, AsyncIterator, Callable, Iterator, Sequence, Union

from raytile.runtime.results import UDFResults
from raytile.viz.live import Live2DPlot, get_plottable_2D_channels

__all__ = ["PlotsSpec", "is_plot", "check_plots", "prepare_plots", "update_plots", "PlottedRun", "default_plot_class",
           "partial_results_shown", "run_iter_with_plots", "run_with_plots"]


#: One channel of a plot: its name, ``(name, fn)``, or a callable ``fn(udf_results, damage)``.
ChannelSpec = Union[str, tuple[str, Callable[..., Any]], Callable[..., Any]]
#: ``plots=`` of ``run_udf``/``run_udf_iter``, in LiberTEM's forms (see the module docstring).
PlotsSpec = Union[bool, None, Sequence[Union[Sequence[ChannelSpec], Live2DPlot]]]


def default_plot_class() -> type:
    """:class:`~raytile.viz.mpl.MPLLive2DPlot` (imported when first needed)."""
    from raytile.viz.mpl import MPLLive2DPlot

    return MPLLive2DPlot


def _is_channel_lists(plots: Any) -> bool:
    return (isinstance(plots, (list, tuple)) and all(isinstance(p, (list, tuple)) for p in plots)
            and all(all(isinstance(c, (str, list, tuple)) or callable(c) for c in p) for p in plots)
            and not any(isinstance(c, Live2DPlot) for p in plots for c in p))


def is_plot(obj: Any) -> bool:
    """Whether ``obj`` can be one of ``plots=``: a :class:`~raytile.viz.live.Live2DPlot`, or any object with
    ``get_udf()`` and ``new_data(udf_results, damage, force=...)`` (LiberTEM takes those too, e.g. a mock)."""
    return isinstance(obj, Live2DPlot) or (callable(getattr(obj, "get_udf", None))
                                          and callable(getattr(obj, "new_data", None)))


def check_plots(udfs: Sequence[Any], plots: Any) -> None:
    """Raise for a ``plots`` argument no run could use, before anything starts.

    TypeError for an object that is neither a channel list nor a plot
    (:func:`is_plot`); ValueError for channel lists not
    one per UDF, or for a plot made for another UDF instance than this run's.
    """
    if not plots or plots is True:
        return
    if _is_channel_lists(plots):
        if len(plots) != len(udfs):
            raise ValueError(f"plots has {len(plots)} channel lists for {len(udfs)} UDFs; give one per UDF")
        return
    made = list(plots)
    bad = [p for p in made if not is_plot(p)]
    if bad:
        raise TypeError(f"plots must be True, a list of channel lists (one per UDF) or a list of plot objects "
                        f"(Live2DPlot or with get_udf() and new_data()); got {bad[0]!r}")
    for plot in made:
        _index(udfs, plot.get_udf())


def prepare_plots(udfs: Sequence[Any], dataset: Any, roi: Any, plots: Any, plot_class: type | None = None,
                  display: bool = True) -> list[Live2DPlot]:
    """The plot objects for ``plots`` (see the module docstring), displayed."""
    from raytile.runtime.notebook import dry_run_results
    from raytile.runtime.results import UDFResults

    check_plots(udfs, plots)
    if not plots:
        return []
    if not (plots is True or _is_channel_lists(plots)):
        return list(plots)
    dry = dry_run_results(dataset, list(udfs), roi)
    if plots is True:
        channels: list[Any] = [get_plottable_2D_channels(buffers) for buffers in dry.buffers]
        for idx, (udf, chans) in enumerate(zip(udfs, channels)):
            if not chans:
                warnings.warn(f"No plottable channels found for UDF #{idx}: {type(udf).__name__}, not plotting.")
    else:
        channels = list(plots)
    cls = plot_class or default_plot_class()
    made = []
    for idx, (udf, chans) in enumerate(zip(udfs, channels)):
        for channel in chans:
            plot = cls(dataset, udf=udf, roi=roi, channel=channel,
                       udfresult=UDFResults((dry.buffers[idx],), dry.damage, {}, 0, 0, False))
            if display:
                plot.display()
            made.append(plot)
    return made


def update_plots(plots: Sequence[Live2DPlot], udfs: Sequence[Any], results: Any, force: bool = False) -> None:
    """Hand a (partial) result to every plot (each redraws unless its ``min_delta`` has not passed)."""
    for plot in plots:
        idx = _index(udfs, plot.get_udf())
        plot.new_data(results.buffers[idx], results.damage.data, force=force)


def _index(udfs: Sequence[Any], udf: Any) -> int:
    for i, u in enumerate(udfs):
        if u is udf:
            return i
    raise ValueError(f"the plot's UDF {udf!r} is not one of this run's UDFs: make plots for the UDF instances "
                     "passed to run_udf")


def _next_due(plots: Sequence[Live2DPlot]) -> float:
    """When the earliest plot may redraw next (monotonic seconds); a plot of another class than
    :class:`~raytile.viz.live.Live2DPlot` throttles itself, so it is handed every result, as in LiberTEM."""
    return min(p.last_update + p.min_delta if isinstance(p, Live2DPlot) else -math.inf for p in plots)


class PlottedRun:
    """A :class:`~raytile.runtime.run.UDFRun` whose partial results also go to plots.

    Iterating it (sync or async) yields what the run yields; each result is
    handed to the plots when one of them is due, and the last one (the
    final data) always. Everything else (``cancel``, ``update_parameters``,
    ``run_id``, ...) is the run's.
    """

    def __init__(self, run: Any, udfs: Sequence[Any], plots: Sequence[Live2DPlot]):
        self._run = run
        self._udfs = list(udfs)
        self.plots = list(plots)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._run, name)

    def _show(self, part: UDFResults) -> None:
        finished = part.finished
        if finished:
            # LiberTEM hands plots the last partition's result, then the final one forced: a plot of
            # another class (which counts on that) gets both; a Live2DPlot draws the final data once
            others = [p for p in self.plots if not isinstance(p, Live2DPlot)]
            if others:
                update_plots(others, self._udfs, part)
            update_plots(self.plots, self._udfs, part, force=True)
        elif time.monotonic() >= _next_due(self.plots):
            update_plots(self.plots, self._udfs, part)

    def __iter__(self) -> Iterator[Any]:
        for part in self._run:
            self._show(part)
            yield part

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Any]:
        async for part in self._run:
            self._show(part)
            yield part

    def result(self) -> Any:
        """Run to the end, plotting; the final results."""
        for _ in self:
            pass
        return self._run._final()

    async def aresult(self) -> Any:
        """Await the end of the run, plotting; the final results."""
        async for _ in self:
            pass
        return self._run._final()


def _udf_list(udf: Any) -> list[Any]:
    from raytile.udf.base import UDF

    return [udf] if isinstance(udf, UDF) else list(udf)


def partial_results_shown(plots: Any, plot_class: type | None = None) -> bool:
    """Whether any plot a run with ``plots`` makes can show a partial result
    (:meth:`~raytile.viz.live.Live2DPlot.shows_partial_results` of its class): False for matplotlib on
    Agg or Jupyter's inline back-end, which draw the final data alone."""
    if plots is True or _is_channel_lists(plots):
        classes = [plot_class or default_plot_class()]
    else:
        classes = [type(p) for p in plots]
    return any(not issubclass(c, Live2DPlot) or c.shows_partial_results() for c in classes)


def run_iter_with_plots(ctx: Any, plots: Any, dataset: Any, udf: Any, roi: Any = None, corrections: Any = None,
                        backends: Any = None, progress: Any = False, sync: bool = True, detached: bool = False,
                        final_only: bool = False) -> PlottedRun:
    """``ctx.run_udf_iter(...)`` with live ``plots`` (see the module docstring).

    The run starts first; its plots are made while it reads (see the module
    docstring). ``final_only``: the run makes no partial results (as
    ``run_udf`` without plots), for plots that would not show them.
    """
    udfs = _udf_list(udf)
    check_plots(udfs, plots)
    run = ctx._start(dataset, udf, roi, corrections, backends, progress, final_only=final_only, detached=detached,
                     sync=sync)
    try:
        made = prepare_plots(udfs, dataset, roi, plots, ctx.plot_class)
    except BaseException:
        run.cancel()
        raise
    return PlottedRun(run, udfs, made)


def run_with_plots(ctx: Any, plots: Any, dataset: Any, udf: Any, roi: Any = None, sync: bool = True,
                   **kwargs: Any) -> Any:
    """``ctx.run_udf(...)`` with live ``plots``: the same return value, plots updated on the way.

    When none of the plots can show a partial result (:func:`partial_results_shown`), the run is
    ``run_udf``'s without plots (no partial results made) and the plots get the final data.
    """
    from raytile.udf.base import UDF

    final_only = not partial_results_shown(plots, ctx.plot_class)
    run = run_iter_with_plots(ctx, plots, dataset, udf, roi=roi, sync=sync, final_only=final_only, **kwargs)
    single = isinstance(udf, UDF)

    def unpack(results: Any) -> Any:
        return results.buffers[0] if single else list(results.buffers)

    if sync:
        return unpack(run.result())

    async def _await() -> Any:
        return unpack(await run.aresult())

    return _await()
