"""`LiveConnection`: what ``LiveContext.make_acquisition`` needs of a detector connection.

Each streaming detector (:mod:`raytile.live.detectors.merlin`,
:mod:`raytile.live.detectors.dectris`) implements it; ``make_acquisition``
and :class:`~raytile.live.sources.LiveSource` call only these methods, so a
new detector plugs in by registering its connection builder
(:mod:`raytile.live.registry`). A detector whose acquisition is a data set of
its own (the memory detector's array) implements :class:`DataSetConnection`
instead. :func:`check_port` and :func:`check_positive_int` check a
connection's parameters.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, Protocol, TypeVar, runtime_checkable

import weakref

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.live.receiver import AcquisitionFrames, StackReceiver, partition_batches

__all__ = ["LiveConnection", "DataSetConnection", "ConnectionBuilder", "PendingAcquisition", "ReceiverConnection", "check_port",
           "check_positive_int"]

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

    def wait_for_acquisition(self, timeout: float | None = None) -> Any:
        """Passive mode: the next acquisition something else starts, as a :class:`PendingAcquisition`,
        or None when none started within ``timeout`` seconds (None: wait as long as it takes)."""
        ...

    def close(self) -> None:
        """Release the connection (its sockets, its receiver's thread); a closed one is not used again."""
        ...

    @property
    def get_active_controller(self) -> Callable[..., Any]:
        """Active mode's controller (detector settings applied when the run starts), made from the
        detector's own keyword parameters."""
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


@runtime_checkable
class DataSetConnection(Protocol):
    """An open connection whose acquisition is a data set of its own, not a stream (the memory
    detector's: an array); ``make_acquisition`` hands its parameters on to :meth:`make_acquisition`."""

    def wait_for_acquisition(self, timeout: float | None = None) -> Any:
        """As :meth:`LiveConnection.wait_for_acquisition`."""
        ...

    def close(self) -> None:
        ...

    def make_acquisition(self, nav_shape: tuple[int, ...] | None = None, frames_per_partition: int | None = None,
                         pending_aq: Any = None, hooks: Any = None) -> Any:
        """The acquisition as a data set (``LiveContext.make_acquisition(conn=this, ...)``)."""
        ...


class ConnectionBuilder(Protocol):
    """What ``make_connection(name)`` returns (a :class:`~raytile.live.registry.DetectorSpec`'s
    ``builder()``): its ``open(**params)`` connects. Typed so that mypy checks each detector's open
    connection against the protocols above."""

    @property
    def open(self) -> Callable[..., LiveConnection | DataSetConnection]: ...


def check_port(detector: str, name: str, port: Any) -> int:
    """``port``, the connection parameter ``name`` of ``detector``, if it is a TCP port (1..65535);
    ConfigValidationError otherwise."""
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigValidationError(f"{detector} connection: parameter {name!r} must be a TCP port, got {port!r}")
    return port


def check_positive_int(detector: str, name: str, value: Any) -> int:
    """``value``, the connection parameter ``name`` of ``detector``, if it is an int >= 1;
    ConfigValidationError otherwise."""
    if not isinstance(value, int) or value < 1:
        raise ConfigValidationError(f"{detector} connection: parameter {name!r} must be a positive int, "
                                    f"got {value!r}")
    return value


class ReceiverConnection(Generic[R]):
    """A detector connection's data side: one receiver kept running across acquisitions, replaced
    by :meth:`connect` when it ended; a context manager that closes it. Subclasses make the receiver
    (:meth:`_new_receiver`) and set ``self._receiver = None`` before calling :meth:`connect`."""

    _receiver: R | None = None
    detector = "detector"
    #: The signal shape of the last :meth:`acquisition_geometry` (None: not read yet).
    _sig_shape: tuple[int, ...] | None = None

    def _addresses(self, api_host: str, api_port: int, data_host: str, data_port: int) -> None:
        """Check the ports and keep the control and data addresses (``self._api_host`` ...)."""
        check_port(self.detector, "api_port", api_port)
        check_port(self.detector, "data_port", data_port)
        self._api_host, self._api_port = api_host, api_port
        self._data_host, self._data_port = data_host, data_port

    def _new_receiver(self) -> R:
        raise NotImplementedError

    def _frames(self, pending: Any, controller: Any, nav_shape: tuple[int, ...], ready: Callable[[], None],
                count: int | None, dtype: np.dtype, af: AcquisitionFrames) -> Iterator[np.ndarray]:
        """The frame arrays of :meth:`acquisition_frames`, read when the run starts reading (the
        stream's feeder thread)."""
        raise NotImplementedError

    def acquisition_frames(self, pending: Any, controller: Any, nav_shape: tuple[int, ...],
                           ready: Callable[[], None], count: int | None, dtype: np.dtype) -> AcquisitionFrames:
        """:meth:`LiveConnection.acquisition_frames`: the stacks of :meth:`_frames`, cut where the
        partitions of the last :meth:`acquisition_geometry`'s stream are."""
        return AcquisitionFrames(lambda af: self._frames(pending, controller, nav_shape, ready, count, dtype, af),
                                 partition_batches(nav_shape, self._sig_shape, dtype))

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
