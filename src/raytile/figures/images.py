"""Labelled figures of 4D-STEM results: what the demo, ``raytile run`` and ``raytile live run`` write.

Two kinds, as LiberTEM's web GUI shows them:

- a detector image (sig-shaped, e.g. the sum of all frames): axes in
  detector pixels, a logarithmic colour bar in counts, and the virtual
  detector's rings drawn on it, with their radii in the legend;
- a scan image (nav-shaped, e.g. a virtual detector's intensity per scan
  position): axes in scan positions, a linear colour bar in counts, the
  aspect ratio of the scan kept (a 64x128 scan is twice as wide as high).

A third, :func:`show`, gives any 2D result (an Analysis result's ``raw_data``
with its title, or an array) a colour bar and a title in one call, for
notebooks where ``.visualized`` is a bare RGBA picture.

Written with matplotlib's Agg canvas: no pyplot, no display needed. Titles
are wrapped to the figure's width, so a long one is never cut off.

>>> fig = detector_figure(np.ones((64, 64)) * 10, "sum of all frames", rings=[(32, 32, 8, 20)])
>>> fig.axes[0].get_xlabel()
'detector x (pixels)'
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Circle

__all__ = ["detector_figure", "scan_figure", "show", "save_figure", "wrap_title"]

#: Width of a figure in inches; its height follows the image's aspect ratio.
FIG_WIDTH_IN = 6.0
#: Height of one legend row (a detector's description) at the foot of a figure, in inches.
LEGEND_ROW_IN = 0.3
#: Characters of a title line: a 6 inch figure holds about 55 at matplotlib's default title size.
TITLE_CHARS = 50


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    """``title`` broken into lines of at most ``width`` characters (a long title is never cut off)."""
    return "\n".join(textwrap.fill(line, width) for line in str(title).splitlines() or [""])


def _figure(shape: tuple[int, int]) -> tuple[Figure, Axes]:
    ny, nx = shape
    aspect = ny / nx  # the image's height over width, kept on screen
    fig = Figure(figsize=(FIG_WIDTH_IN, min(12.0, max(2.5, FIG_WIDTH_IN * 0.8 * aspect + 1.2))), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def detector_figure(image: np.ndarray, title: str, rings: Sequence[tuple[float, float, float, float]] = (),
                    frames: int | None = None) -> Figure:
    """A sig-shaped image in counts on a log colour scale, with ``rings`` ``(cy, cx, ri, ro)`` drawn.

    The colour bar is in counts (its ticks are counts, the scale is named
    logarithmic); pixels with 0 counts show as the lowest colour.
    """
    img = np.asarray(image, dtype=np.float64)
    if img.ndim != 2:
        raise ValueError(f"a detector image must be 2D, got shape {img.shape}")
    fig, ax = _figure(img.shape)
    positive = img[img > 0]
    vmin = float(positive.min()) if positive.size else 1.0
    vmax = max(float(img.max()), vmin * 10)
    im = ax.imshow(np.maximum(img, vmin), cmap="inferno", interpolation="nearest", aspect="equal",
                   norm=LogNorm(vmin=vmin, vmax=vmax))
    ax.set_xlabel("detector x (pixels)")
    ax.set_ylabel("detector y (pixels)")
    ax.set_title(wrap_title(title))
    for i, (cy, cx, ri, ro) in enumerate(rings):
        label = f"ring detector: centre ({cy:g}, {cx:g}), radii {ri:g} to {ro:g} px"
        for k, r in enumerate((ri, ro)):
            ax.add_patch(Circle((cx, cy), r, fill=False, edgecolor="cyan", linewidth=1.2,
                                linestyle="--", label=label if k == 0 else None))
    what = f"counts (sum of {frames} frames)" if frames else "counts"
    fig.colorbar(im, ax=ax, shrink=0.85, label=f"{what}, log scale")
    if rings:  # at the figure's foot, below the axis label (never over it), the layout keeping room for it
        fig.legend(*ax.get_legend_handles_labels(), loc="lower center", fontsize=8, frameon=False)
        fig.tight_layout(rect=(0.0, LEGEND_ROW_IN * len(rings) / fig.get_figheight(), 1.0, 1.0))
    else:
        fig.tight_layout()
    return fig


def scan_figure(image: np.ndarray, title: str, what: str = "counts") -> Figure:
    """A nav-shaped image (one value per scan position) on a linear colour scale, its aspect kept."""
    img = np.asarray(image, dtype=np.float64)
    if img.ndim == 1:
        img = img[None, :]
    if img.ndim != 2:
        raise ValueError(f"a scan image must be 1D or 2D, got shape {img.shape}")
    fig, ax = _figure(img.shape)
    finite = img[np.isfinite(img)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    im = ax.imshow(img, cmap="inferno", interpolation="nearest", aspect="equal",
                   norm=Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1))
    ax.set_xlabel("scan x (positions)")
    ax.set_ylabel("scan y (positions)")
    ax.set_title(wrap_title(title))
    fig.colorbar(im, ax=ax, shrink=0.85, label=f"{what}, linear scale")
    fig.tight_layout()
    return fig


def show(result: Any, title: str | None = None, what: str = "counts", log: bool | None = None,
         cmap: str = "gist_earth") -> Figure:
    """A 2D result as a figure with a colour bar and a title, in one call.

    ``result``: an Analysis result (``ctx.run(...).intensity``: its
    ``raw_data``, ``title`` and ``desc`` are used) or a 2D array. Its colours
    are those of ``result.visualized`` (LiberTEM's ``gist_earth``, outliers
    left out of the scale, NaN outside a ROI shown as blank), with the colour
    bar in ``what`` (counts by default). ``log``: a logarithmic scale; None
    takes it from the result (keys ending in ``_log``). Complex data show
    their magnitude. A result that is no 2D image of numbers (a CoM field,
    direction as hue) is shown as its ``visualized`` picture, without a bar.

    In a notebook the returned figure shows itself as a cell's last value.

    >>> fig = show(np.arange(12.0).reshape(3, 4), title="a ramp")
    >>> [a.get_title() for a in fig.axes][0]
    'a ramp'
    """
    from raytile.viz.scale import robust_limits

    raw = getattr(result, "raw_data", result)
    if title is None:
        name, desc = getattr(result, "title", None), getattr(result, "desc", None)
        title = " - ".join(t for t in (name, desc if desc != name else None) if t) or "result"
    if log is None:
        log = str(getattr(result, "key", "")).endswith("_log")
    data = np.asarray(raw)
    if data.dtype.kind == "c":
        data, title = np.abs(data), f"{title} (magnitude)"
    image = data.ndim == 2 and data.dtype.kind in "biuf"
    shape = data.shape[:2] if image or data.ndim < 2 else np.asarray(result.visualized).shape[:2]
    fig, ax = _figure(tuple(shape) if len(shape) == 2 else (1, max(1, data.size)))
    ax.set_title(wrap_title(title))
    ax.set_xlabel("x (pixels)")
    ax.set_ylabel("y (pixels)")
    if not image:
        ax.imshow(np.asarray(result.visualized), interpolation="nearest", aspect="equal")
        fig.tight_layout()
        return fig
    values = data.astype(np.float64)
    lo, hi = robust_limits(values)
    if log:
        positive = values[np.isfinite(values) & (values > 0)]
        lo = float(positive.min()) if positive.size else 1.0
        norm: Normalize = LogNorm(vmin=lo, vmax=max(hi, lo * 10))
    else:
        norm = Normalize(vmin=lo, vmax=hi)
    im = ax.imshow(values, cmap=cmap, interpolation="nearest", aspect="equal", norm=norm)
    fig.colorbar(im, ax=ax, shrink=0.85, label=f"{what}, {'log' if log else 'linear'} scale")
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write ``fig`` as a PNG."""
    fig.savefig(path, format="png")
