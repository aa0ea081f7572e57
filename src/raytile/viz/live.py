"""`Live2DPlot`: a plot of one 2D channel of a running UDF, updated as partial results arrive.

LiberTEM's plotting interface (``libertem.viz.base.Live2DPlot``): a plot
belongs to one UDF instance and one ``channel`` of its results:

- ``None``: the first plottable (2D after squeezing) result buffer;
- ``"name"``: that buffer;
- ``("name", fn)``: ``fn(buffer.data)`` (nav buffers keep their damage);
- ``fn(udf_results, damage) -> (array, damage)``: anything derived from all the results.

``new_data`` is called with each partial result; it redraws at most every
``min_delta`` seconds (``force=True`` always, for the final data). Positions
outside the ROI or not yet merged are masked (NaN in the data, excluded from
the colour scale, which is outlier-robust: :func:`~raytile.viz.scale.robust_limits`).
Subclasses draw: :class:`~raytile.viz.mpl.MPLLive2DPlot` (matplotlib),
:class:`~raytile.viz.bqp.BQLive2DPlot` (bqplot in Jupyter), :class:`Dummy2DPlot`
(nothing, for tests and batch jobs).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numpy as np

__all__ = ["Live2DPlot", "Dummy2DPlot", "get_plottable_2D_channels", "color_limits"]

#: Empty results of a run (shapes, kinds, dtypes) for ``Live2DPlot`` without ``udfresult``: set by
#: :mod:`raytile.runtime.notebook` (``dry_run_results``), which sits above this module.
dry_run: Callable[..., Any] | None = None

log = logging.getLogger(__name__)


def get_plottable_2D_channels(buffers: dict[str, Any]) -> list[str]:
    """The names of the result buffers that are 2D once axes of length 1 are dropped."""
    return [name for name, buf in buffers.items() if len(np.asarray(buf.data).squeeze().shape) == 2]


def color_limits(data: Any, damage: Any) -> tuple[float, float] | None:
    """Outlier-robust ``(vmin, vmax)`` of the valid, finite values of ``data``; None if there are none."""
    from raytile.viz.scale import robust_limits, valid_values

    values = valid_values(np.ma.getdata(data), damage)
    return robust_limits(values) if values.size else None


class Live2DPlot:
    """Base class: keeps the channel's latest data and damage; subclasses implement ``display`` and ``update``.

    ``udfresult``: the results of a dry run (``{name: buffer}`` per UDF as a
    :class:`~raytile.runtime.results.UDFResults`), to know the shapes; made
    here if not given.
    """

    def __init__(self, dataset: Any, udf: Any, roi: Any = None, channel: Any = None, title: str | None = None,
                 min_delta: float = 0.0, udfresult: Any = None):
        if udfresult is None:
            if dry_run is None:
                raise TypeError("Live2DPlot needs udfresult= (import raytile first: it registers the dry run)")
            udfresult = dry_run(dataset, [udf], roi)
        buffers = udfresult.buffers[0]
        eligible = get_plottable_2D_channels(buffers)
        extract: Callable[..., tuple[Any, Any]] | None = None
        if channel is None:
            if not eligible:
                raise ValueError(f"No plottable 2D channel found for {type(udf).__name__}")
            channel = eligible[0]
        if callable(channel):
            extract, channel_title, channel = channel, getattr(channel, "__name__", "channel"), None
        elif isinstance(channel, (tuple, list)):
            name, func = channel
            if name not in buffers:
                raise ValueError(f"channel {name} not found, have: {list(buffers)}")
            nav = buffers[name].kind == "nav"

            def extract(udf_results: dict, damage: Any) -> tuple[Any, Any]:
                return func(udf_results[name].data), (damage if nav else True)

            channel_title, channel = f"{getattr(func, '__name__', 'f')}({name})", name
        else:
            if channel not in eligible:
                raise ValueError(f"channel {channel} not found or not plottable, have: {eligible!r}")
            channel_title = channel
        self._extract = extract
        self.channel = channel
        self.title = title if title is not None else f"{type(udf).__name__}: {channel_title}"
        self.udf = udf
        self.min_delta = min_delta
        self.last_update = 0.0
        self.updates = 0
        self.data, self.damage = self.extract(buffers, udfresult.damage.data)

    @classmethod
    def shows_partial_results(cls) -> bool:
        """Whether plots of this class can show a result before the run ends (default True). Where none
        can (matplotlib on Agg or Jupyter's inline back-end), ``run_udf(..., plots=...)`` runs as without
        plots, with no partial results made, and the plots get the final data alone."""
        return True

    def shown(self) -> None:
        """The plot was just drawn: the next redraw is due in ``min_delta`` (a short run draws only its
        final data)."""
        self.last_update = time.monotonic()

    def get_udf(self) -> Any:
        """The UDF instance this plot belongs to."""
        return self.udf

    def extract(self, udf_results: dict, damage: Any) -> tuple[Any, Any]:
        """``(data, damage)`` of this plot's channel: masked outside the ROI and where nothing is merged."""
        if self._extract is not None:
            return self._extract(udf_results, damage)
        buf = udf_results[self.channel]
        data = np.asarray(buf.data, dtype=np.float64) if np.asarray(buf.data).dtype.kind != "c" \
            else np.abs(np.asarray(buf.data))
        valid = np.asarray(buf.valid_mask, dtype=bool)
        data = np.where(valid, data, np.nan).squeeze()
        return data, valid.squeeze()

    def new_data(self, udf_results: dict, damage: Any, force: bool = False) -> bool:
        """Take a (partial) result; redraw unless the last redraw is less than ``min_delta`` ago.

        Returns whether it redrew.
        """
        start = time.monotonic()
        if not force and start - self.last_update < self.min_delta:
            return False
        self.data, valid = self.extract(udf_results, damage)
        finite = np.isfinite(np.asarray(self.data, dtype=np.float64) if np.asarray(self.data).dtype.kind != "c"
                             else np.abs(np.asarray(self.data)))
        if hasattr(valid, "shape"):
            extra = tuple(range(np.ndim(valid), finite.ndim))
            if extra:  # e.g. RGB channels: a position counts when all its values are finite
                finite = np.all(finite, axis=extra)
            valid = np.asarray(valid, dtype=bool).reshape(finite.shape) & finite
        else:
            valid = finite & bool(valid)
        self.damage = valid
        self.update(valid, force=force)
        self.last_update = time.monotonic()
        self.updates += 1
        log.debug("%s redrawn in %.3f s", type(self).__name__, self.last_update - start)
        return True

    def update(self, damage: Any, force: bool = False) -> None:
        """Redraw from ``self.data``; ``damage`` marks the valid (merged, finite) positions."""
        raise NotImplementedError(f"{type(self).__name__} must implement update()")

    def display(self) -> None:
        """Show the plot (in the current Jupyter cell, or a window); subclasses call
        :meth:`shown` after, so that the first redraw waits ``min_delta``."""
        raise NotImplementedError(f"{type(self).__name__} must implement display()")


class Dummy2DPlot(Live2DPlot):
    """A plot that draws nothing (tests, batch jobs); it still follows the data."""

    def update(self, damage: Any, force: bool = False) -> None:
        pass

    def display(self) -> None:
        pass
