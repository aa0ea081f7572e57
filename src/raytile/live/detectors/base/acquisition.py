"""``libertem_live.detectors.base.acquisition`` at its ported path: :func:`determine_nav_shape`.

In raytile an acquisition is a stream data set (:class:`raytile.io.formats.stream.StreamDataSet`),
whatever its detector: ``LiveContext.make_acquisition(conn=...)`` returns one, and each detector's
``<Detector>Acquisition`` (``MerlinAcquisition``, ``DectrisAcquisition``) names that class at
LiberTEM-live's path, for imports and type annotations. It is not built directly (LiberTEM-live's
is not either): use ``make_acquisition``.

LiberTEM-live's signature over raytile's rules (:func:`raytile.live.nav_shape.determine_nav_shape`):
the hook, then ``-1`` placeholders, then the pending acquisition's or the controller's shape, then
a square. Errors are LiberTEM-live's types: ``ValueError`` for a malformed shape
(:class:`~raytile.common.errors.NavShapeError`), ``RuntimeError`` when nothing gives the shape
(:class:`~raytile.common.errors.NavShapeUnknown`).

>>> determine_nav_shape(hooks=Hooks(), pending_aq=pending, controller=None, shape_hint=(-1, 64))  # doctest: +SKIP
(256, 64)
"""

from __future__ import annotations

from typing import Any

from raytile.live.hooks import Hooks
from raytile.live.nav_shape import determine_nav_shape as _determine

__all__ = ["determine_nav_shape"]


def determine_nav_shape(hooks: Hooks | None, pending_aq: Any, controller: Any,
                        shape_hint: tuple[int, ...] | None) -> tuple[int, ...]:
    """The nav shape of ``pending_aq``'s images (``pending_aq.nimages``), as LiberTEM-live finds it."""
    detector_shape = getattr(pending_aq, "nav_shape", None)
    if detector_shape is None and controller is not None and hasattr(controller, "determine_nav_shape"):
        try:
            detector_shape = controller.determine_nav_shape(nimages=pending_aq.nimages)
        except NotImplementedError:
            detector_shape = None
    hook = hooks.on_determine_nav_shape if hooks is not None else None
    return _determine(pending_aq.nimages, shape_hint, hook, detector_shape)
