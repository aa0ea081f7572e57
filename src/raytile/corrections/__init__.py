"""Detector and coordinate corrections at the path of ``libertem.corrections``.

``raytile.corrections.coordinates`` holds the 2x2 matrices LiberTEM's
``com.py`` and its users build scan rotations and flips from;
``CorrectionSet`` (dark frame, gain map, excluded pixels; LiberTEM's
constructor and getters) is :class:`raytile.io.corrections.CorrectionSet`,
the one ``ctx.run_udf(..., corrections=...)`` takes. It is looked up on
first access, so that importing the coordinate helpers (which
:mod:`raytile.udf.com` does) does not load the I/O layer.

>>> from raytile.corrections import CorrectionSet, coordinates
>>> CorrectionSet.__module__
'raytile.io.corrections'
>>> coordinates.flip_y().tolist()
[[-1, 0], [0, 1]]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raytile.corrections import coordinates

if TYPE_CHECKING:
    from raytile.io.corrections import CorrectionSet

__all__ = ["CorrectionSet", "coordinates"]


def __getattr__(name: str) -> Any:
    if name == "CorrectionSet":
        return importlib.import_module("raytile.io.corrections").CorrectionSet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
