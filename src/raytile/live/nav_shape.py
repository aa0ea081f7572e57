"""How a live acquisition's nav shape is found: LiberTEM-live's order of rules, as a pure function.

1. a concrete ``nav_shape`` given to ``make_acquisition`` (no ``-1``), as given: a run on an
   acquisition with fewer images ends with :class:`~raytile.common.errors.AcquisitionCancelled`
   (a ``UDFRunCancelled``), one with more reads the first ones;
2. what :meth:`Hooks.on_determine_nav_shape` returns;
3. ``-1`` placeholders filled from the image count;
4. what the detector's acquisition header says (ScanX/ScanY, frames per trigger);
5. a square of the image count;
6. else :class:`~raytile.common.errors.NavShapeUnknown` (a ``RuntimeError``, as LiberTEM-live's).

A malformed shape raises :class:`~raytile.common.errors.NavShapeError` (a ``ValueError``, as
LiberTEM-live's, its messages starting with LiberTEM-live's words). Up to two ``-1`` placeholders,
as in LiberTEM-live; two are filled as a square.

>>> determine_nav_shape(nimages=4096, shape_hint=(-1, 32))
(128, 32)
>>> determine_nav_shape(nimages=4096)
(64, 64)
"""

from __future__ import annotations

import math
from typing import Callable

from raytile.common.errors import NavShapeError, NavShapeUnknown
from raytile.live.hooks import DetermineNavShapeEnv

__all__ = ["determine_nav_shape"]


def determine_nav_shape(nimages: int, shape_hint: tuple[int, ...] | None = None,
                        hook: Callable[[DetermineNavShapeEnv], tuple[int, ...] | None] | None = None,
                        detector_shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
    if shape_hint is not None:
        shape_hint = tuple(int(s) for s in shape_hint)
        if 0 in shape_hint:
            raise NavShapeError("shape cannot contain zeros")  # LiberTEM-live's words, the whole message
        if any(s < -1 for s in shape_hint):
            raise NavShapeError(f"make_acquisition: parameter 'nav_shape' {shape_hint} must hold positive "
                                f"sizes or -1 placeholders")
        if -1 not in shape_hint:  # as given, as in LiberTEM-live: a run that finds fewer images is cancelled
            return shape_hint
    if hook is not None:
        found = hook(DetermineNavShapeEnv(nimages=nimages, shape_hint=shape_hint))
        if found is not None:
            found = tuple(int(s) for s in found)
            if -1 in found:
                raise NavShapeError(f"Result from `Hooks.on_determine_nav_shape` should be a tuple of integers, "
                                    f"without placeholders (got {found})")
            return _matching(found, nimages, "Hooks.on_determine_nav_shape's result")
    if shape_hint is not None:
        return _fill_placeholders(shape_hint, nimages)
    if detector_shape is not None:
        return _matching(tuple(detector_shape), nimages, "the detector's scan shape")
    side = math.isqrt(nimages)
    if nimages > 0 and side * side == nimages:
        return (side, side)
    raise NavShapeUnknown(f"Can't handle non-square scans by default, please override "
                          f"`Hooks.on_determine_nav_shape` or pass in a concrete nav_shape: {nimages} images are "
                          f"not a square; e.g. nav_shape=(-1, {_a_divisor(nimages)})")


def _matching(shape: tuple[int, ...], nimages: int, what: str) -> tuple[int, ...]:
    if nimages and math.prod(shape) != nimages:
        raise NavShapeError(f"make_acquisition: {what} {shape} holds {math.prod(shape)} frames, the "
                            f"acquisition has {nimages}")
    return shape


def _fill_placeholders(hint: tuple[int, ...], nimages: int) -> tuple[int, ...]:
    known = math.prod(s for s in hint if s != -1)
    holes = hint.count(-1)
    if holes > 2:
        raise NavShapeError(f"shape can only contain up to two placeholders (-1); shape is {hint}")
    if nimages <= 0 or nimages % known:
        raise NavShapeError(f"number of images ({nimages}) must be divisible by the fixed parts of the shape "
                            f"({known}), but has rest {nimages % known if nimages > 0 else nimages}: "
                            f"parameter 'nav_shape' {hint}")
    rest = nimages // known
    if holes == 1:
        return tuple(rest if s == -1 else s for s in hint)
    side = math.isqrt(rest)
    if side * side != rest:
        raise NavShapeError(f"make_acquisition: parameter 'nav_shape' {hint}: {rest} images do not fill "
                            f"{holes} equal placeholders")
    return tuple(side if s == -1 else s for s in hint)


def _a_divisor(n: int) -> int:
    for d in range(int(math.isqrt(max(n, 1))), 0, -1):
        if n % d == 0:
            return n // d
    return n
