"""`DeferredFigure`: a matplotlib Figure whose content is made just before it is drawn or looked at.

On a non-interactive back-end (Agg, Jupyter's inline) a figure is rendered
only when it is shown or saved, so a live plot's Axes and image (~5 ms of
CPU a figure for matplotlib to make, taken from the cores the run's workers
need) can wait until then and be made once, from the plot's latest data.
The figure is made and registered with pyplot at once (``plt.get_fignums()``
lists it, Jupyter shows it at the end of the cell); everything that draws or
reads it (``show``, ``savefig``, ``canvas.draw()``, Jupyter's display,
``fig.axes``, ``get_axes()``, ``get_children()``, ``gca()``, ``plt.gci()``,
pickling) first calls the figure's ``prepare`` callback, so it looks as if
its content had been there all along.

>>> fig = plt.figure(FigureClass=DeferredFigure)
>>> fig.defer(lambda f: f.add_subplot().imshow(latest_frame))
>>> fig.axes[0].images[0].get_array() is latest_frame   # made when asked for
True
"""

from __future__ import annotations

from typing import Any, Callable

from matplotlib.figure import Figure

__all__ = ["DeferredFigure"]


class DeferredFigure(Figure):
    """A Figure that calls ``prepare(figure)`` (set with :meth:`defer`) before each draw and each read
    of its Axes or artists; ``prepare`` makes or refreshes the content and must be cheap when there is
    nothing new. A ``prepare`` that reads the figure (``add_subplot`` does) is not called again inside."""

    _prepare: Callable[[Figure], None] | None = None
    _preparing = False

    def defer(self, prepare: Callable[[Figure], None]) -> None:
        """Make (or refresh) the figure's content with ``prepare(figure)`` when it is next drawn or read."""
        self._prepare = prepare

    def _ready(self) -> None:
        if self._prepare is None or self._preparing:
            return
        self._preparing = True
        try:
            self._prepare(self)
        finally:
            self._preparing = False

    @property  # type: ignore[misc]
    def axes(self) -> list[Any]:  # type: ignore[override]
        """The figure's Axes, made first if they were deferred (see the module docstring)."""
        self._ready()
        return super().axes

    def get_axes(self) -> list[Any]:
        return self.axes

    def get_children(self) -> list[Any]:
        self._ready()
        return super().get_children()

    def gca(self) -> Any:
        self._ready()
        return super().gca()

    def _gci(self) -> Any:
        self._ready()
        return super()._gci()

    def draw(self, renderer: Any) -> None:
        self._ready()
        super().draw(renderer)

    def __getstate__(self) -> dict:
        self._ready()
        state = super().__getstate__()  # type: ignore[misc]  # Figure's (not in its stubs)
        state.pop("_prepare", None)  # the plot behind it stays here; the copy has its content already
        return state
