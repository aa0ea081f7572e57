"""Detector and coordinate corrections at the path of ``libertem.corrections``.

``raytile.corrections.coordinates`` holds the 2x2 matrices LiberTEM's
``com.py`` and its users build scan rotations and flips from;
``CorrectionSet`` (dark frame, gain map, excluded pixels; LiberTEM's
constructor and getters) is :class:`raytile.io.corrections.CorrectionSet`,
the one ``ctx.run_udf(..., corrections=...)`` takes. This package is a
facade at LiberTEM's path, above the I/O layer: raytile's own modules import
:mod:`raytile.common.coordinates` and :mod:`raytile.io.corrections` instead.

>>> from raytile.corrections import CorrectionSet, coordinates
>>> CorrectionSet.__module__
'raytile.io.corrections'
>>> coordinates.flip_y().tolist()
[[-1, 0], [0, 1]]
"""

from __future__ import annotations

from raytile.corrections import coordinates
from raytile.io.corrections import CorrectionSet

__all__ = ["CorrectionSet", "coordinates"]
