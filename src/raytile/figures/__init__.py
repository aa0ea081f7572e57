"""Labelled figures of results: axes, a colour bar in counts, the detector geometry drawn.

- :mod:`raytile.figures.images`: a detector (sig) image, a scan (nav) image,
  and :func:`show`, one call that gives an Analysis result's picture a colour
  bar and a title in a notebook (``show(ctx.run(ring).intensity)``);
- :mod:`raytile.figures.results`: the built-in UDFs' figures by name, as
  ``raytile demo``, ``run`` and ``live run`` write them;
- :mod:`raytile.figures.outputs`: an ``.npz`` with its PNGs beside it, never
  over an earlier output.
"""

from raytile.figures.images import detector_figure, save_figure, scan_figure, show, wrap_title
from raytile.figures.outputs import free_outputs, npz_path, write_results
from raytile.figures.results import FIGURE_NAMES, result_figures

__all__ = ["detector_figure", "scan_figure", "show", "save_figure", "wrap_title", "result_figures",
           "FIGURE_NAMES", "free_outputs", "npz_path", "write_results"]
