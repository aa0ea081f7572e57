"""`LiveConnection`: what ``LiveContext.make_acquisition`` needs of a detector connection.

Each detector (:mod:`raytile.live.detectors.merlin`,
:mod:`raytile.live.detectors.dectris`) implements it; ``make_acquisition``
calls only these methods, so a new detector plugs in by registering its
connection builder in :data:`raytile.live.api.DETECTORS`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import numpy as np

__all__ = ["LiveConnection", "PendingAcquisition"]


@runtime_checkable
class PendingAcquisition(Protocol):
    """An acquisition announced by the detector (passive mode): its image count (0: continuous) and
    the scan shape its header gives, if any."""

    @property
    def nimages(self) -> int: ...

    @property
    def nav_shape(self) -> tuple[int, ...] | None: ...


@runtime_checkable
class LiveConnection(Protocol):
    """An open detector connection (see the module docstring)."""

    def get_active_controller(self, **kwargs: Any) -> Any:
        """Active mode's controller (detector settings applied when the run starts)."""
        ...

    def acquisition_geometry(self, pending: Any) -> tuple[tuple[int, ...], np.dtype]:
        """``(sig_shape, dtype)`` of the frames of ``pending`` (None: the next active acquisition)."""
        ...

    def acquisition_frames(self, pending: Any, controller: Any, nav_shape: tuple[int, ...],
                           ready: Callable[[], None], count: int | None, dtype: np.dtype) -> Iterable[np.ndarray]:
        """The acquisition's frame stacks ``(k, *sig_shape)`` of ``dtype``, ``count`` frames (None: until it
        ends). Active mode (``pending`` None): start it, calling ``ready`` once the detector is armed.
        An iterable with a ``stats`` attribute (:class:`~raytile.live.receiver.AcquisitionFrames`) gives the
        acquisition its ``aq.stats`` (frames delivered, frames lost)."""
        ...
