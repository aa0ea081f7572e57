"""`LiveConnection`: what ``LiveContext.make_acquisition`` needs of a detector connection.

Each detector (:mod:`raytile.live.detectors.merlin`,
:mod:`raytile.live.detectors.dectris`) implements it; ``make_acquisition``
calls only these methods, so a new detector plugs in by registering its
connection builder in :data:`raytile.live.api.DETECTORS`.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Protocol, TypeVar, runtime_checkable

import weakref

import numpy as np

from raytile.common.errors import DataSetException
from raytile.live.receiver import AcquisitionFrames, StackReceiver

__all__ = ["LiveConnection", "PendingAcquisition", "ReceiverConnection"]

R = TypeVar("R", bound=StackReceiver)


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
                           ready: Callable[[], None], count: int | None, dtype: np.dtype) -> AcquisitionFrames:
        """The acquisition's frame stacks ``(k, *sig_shape)`` of ``dtype``, ``count`` frames (None: until it
        ends), with their ``stats`` (frames delivered, frames lost: the acquisition's ``aq.stats``) and
        ``batch`` (set by ``make_acquisition`` to cut the stacks where the partitions are). Active mode
        (``pending`` None): start it, calling ``ready`` once the detector is armed."""
        ...


class ReceiverConnection(Generic[R]):
    """A detector connection's data side: one receiver kept running across acquisitions, replaced
    by :meth:`connect` when it ended; a context manager that closes it. Subclasses make the receiver
    (:meth:`_new_receiver`) and set ``self._receiver = None`` before calling :meth:`connect`."""

    _receiver: R | None = None
    detector = "detector"

    def _new_receiver(self) -> R:
        raise NotImplementedError

    def connect(self) -> R:
        """The running receiver (a new one, started, if there was none or it ended)."""
        if self._receiver is None or not self._receiver.running:
            if self._receiver is not None:
                self._receiver.close()
            self._receiver = self._new_receiver()
            self._receiver.start()
            # a connection the user never closes releases its socket when it is collected (the
            # receiver's thread holds the receiver, not the connection), so the detector can go on
            weakref.finalize(self, self._receiver.close)
        return self._receiver

    @property
    def receiver(self) -> R:
        """The data connection's receiver (its failures stay visible: it is not replaced here)."""
        if self._receiver is None:
            raise DataSetException(f"{self.detector} connection: closed; open a new one or call connect()")
        return self._receiver

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def __enter__(self) -> Any:
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
