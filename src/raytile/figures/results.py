"""The figures of the built-in UDFs' results by name (``sum``, ``sumsig``, ``ring``), as the commands write them.

``raytile demo``, ``raytile run`` and ``raytile live run`` all save the same
pictures beside their ``.npz``: the sum frame in counts on a log scale with
the ring detector drawn on it, and the scan images of the integrated
intensity and of the ring detector, each with its axes and colour bar. A
partial result (a live run stopped mid-scan) says so in its titles, with the
share of the scan it holds; positions not yet measured are blank.

>>> figs = result_figures({"sumsig": np.ones((4, 8))}, rings=())
>>> sorted(figs), figs["sumsig"].axes[0].get_xlabel()
(['sumsig'], 'scan x (positions)')
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from raytile.figures.images import detector_figure, scan_figure

__all__ = ["result_figures", "FIGURE_NAMES"]

#: The results that have a figure, by the commands' UDF names.
FIGURE_NAMES = ("sum", "sumsig", "ring")


def result_figures(arrays: Mapping[str, np.ndarray], rings: Sequence[tuple[float, float, float, float]],
                   frames: int | None = None, done: float | None = None) -> dict[str, Figure]:
    """The figures of ``arrays`` (``{"sum": sig image, "sumsig": scan, "ring": scan}``, any of them),
    by name. ``rings``: ``(cy, cx, ri, ro)`` of the ring detector, drawn on the sum frame. ``frames``:
    the frames summed (named in the colour bar). ``done``: the share of the scan a partial result holds
    (None: a complete one)."""
    note = "" if done is None else f" (partial: {100 * done:.0f} % of the scan)"
    figs: dict[str, Figure] = {}
    if "sum" in arrays:
        figs["sum"] = detector_figure(np.asarray(arrays["sum"]), "SumUDF: sum of all frames" + note,
                                      rings=rings, frames=frames)
    if "sumsig" in arrays:
        figs["sumsig"] = scan_figure(np.asarray(arrays["sumsig"]),
                                     "SumSigUDF: integrated intensity per scan position" + note,
                                     what="counts (sum over each frame)")
    if "ring" in arrays:
        figs["ring"] = scan_figure(np.asarray(arrays["ring"]), "ring virtual detector (ADF) per scan position" + note,
                                   what="counts inside the ring")
    return figs
