"""Figures of a 4D-STEM result that a scientist can judge data by (the demo's PNGs).

Two kinds, as LiberTEM's web GUI shows them:

- a detector image (sig-shaped, e.g. the sum of all frames): axes in
  detector pixels, a logarithmic colour bar in counts, and the virtual
  detector's rings drawn on it, with their radii in the legend;
- a scan image (nav-shaped, e.g. a virtual detector's intensity per scan
  position): axes in scan positions, a linear colour bar in counts, the
  aspect ratio of the scan kept (a 64x128 scan is twice as wide as high).

Written with matplotlib's Agg canvas: no pyplot, no display needed.

>>> fig = detector_figure(np.ones((64, 64)) * 10, "sum of all frames", rings=[(32, 32, 8, 20)])
>>> fig.axes[0].get_xlabel()
'detector x (pixels)'
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Circle

__all__ = ["detector_figure", "scan_figure", "save_figure"]

#: Width of a figure in inches; its height follows the image's aspect ratio.
FIG_WIDTH_IN = 6.0


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
    ax.set_title(title)
    for i, (cy, cx, ri, ro) in enumerate(rings):
        label = f"ring detector: centre ({cy:g}, {cx:g}), radii {ri:g} to {ro:g} px"
        for k, r in enumerate((ri, ro)):
            ax.add_patch(Circle((cx, cy), r, fill=False, edgecolor="cyan", linewidth=1.2,
                                linestyle="--", label=label if k == 0 else None))
    if rings:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=8, frameon=False)
    what = f"counts (sum of {frames} frames)" if frames else "counts"
    fig.colorbar(im, ax=ax, shrink=0.85, label=f"{what}, log scale")
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
    ax.set_title(title)
    fig.colorbar(im, ax=ax, shrink=0.85, label=f"{what}, linear scale")
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write ``fig`` as a PNG."""
    fig.savefig(path, format="png")
