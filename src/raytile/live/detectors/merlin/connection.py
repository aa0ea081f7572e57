"""A Merlin data connection kept open across acquisitions, its pending acquisitions and controller.

>>> conn = MerlinConnectionBuilder().open(api_host="127.0.0.1", data_host="127.0.0.1")   # doctest: +SKIP
>>> pending = conn.wait_for_acquisition(10.0)     # passive: something else arms and triggers
>>> pending.nimages, pending.nav_shape
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from raytile.common.errors import AcquisitionCancelled, AcquisitionError, ConfigValidationError, DataSetException
from raytile.live.detectors.merlin.control import MerlinControl
from raytile.live.detectors.merlin.mpx import AcquisitionHeader
from raytile.live.detectors.merlin.receiver import MerlinReceiver
from raytile.live.connection import ReceiverConnection, check_positive_int
from raytile.live.receiver import AcquisitionFrames

__all__ = ["MerlinConnectionBuilder", "MerlinDetectorConnection", "MerlinPendingAcquisition",
           "MerlinActiveController", "RECOVERY_STRATEGIES"]

RECOVERY_STRATEGIES = ("immediate_reconnect", "drain_then_reconnect")
#: Pixel type of the decoded frames for each counter depth.
DTYPES: dict[int, np.dtype] = {1: np.dtype(np.uint8), 6: np.dtype(np.uint8), 12: np.dtype(np.uint16), 24: np.dtype(np.uint32)}


class MerlinPendingAcquisition:
    """An armed acquisition whose header arrived: ``nimages`` (0: continuous) and the ``nav_shape``
    the header gives (ScanX/ScanY or frames per trigger), else None."""

    def __init__(self, header: AcquisitionHeader):
        self._header = header

    @property
    def header(self) -> AcquisitionHeader:
        return self._header

    @property
    def nimages(self) -> int:
        return self._header.nimages

    @property
    def nav_shape(self) -> tuple[int, ...] | None:
        return self._header.nav_shape


class MerlinActiveController:
    """Active mode: raytile waits for the acquisition that ``Hooks.on_ready_for_data`` starts."""

    def determine_nav_shape(self, nimages: int) -> tuple[int, ...] | None:
        return None


class MerlinDetectorConnection(ReceiverConnection[MerlinReceiver]):
    """A data connection to the Merlin software, kept open; control connections on demand.

    Parameters as LiberTEM-live's: ``api_host``/``api_port`` (control, 6341),
    ``data_host``/``data_port`` (data, 6342), ``drain``, ``recovery_strategy``,
    ``huge_pages``. raytile's own: ``frame_stack_size`` (frames per receive
    slot), ``slots`` (the receive slab's size: its memory bound) and
    ``timeout`` (seconds of silence mid-acquisition before it fails).
    """

    detector = "merlin"

    def __init__(self, *, api_host: str = "127.0.0.1", api_port: int = 6341, data_host: str = "127.0.0.1",
                 data_port: int = 6342, drain: bool = False, recovery_strategy: str = "immediate_reconnect",
                 huge_pages: bool = False, frame_stack_size: int = 64, slots: int = 16, timeout: float = 10.0):
        self._addresses(api_host, api_port, data_host, data_port)
        if recovery_strategy not in RECOVERY_STRATEGIES:
            raise ConfigValidationError(f"merlin connection: parameter 'recovery_strategy' must be one of "
                                        f"{RECOVERY_STRATEGIES}, got {recovery_strategy!r}")
        check_positive_int("merlin", "frame_stack_size", frame_stack_size)
        check_positive_int("merlin", "slots", slots)
        self._drain, self._recovery_strategy, self._huge_pages = drain, recovery_strategy, huge_pages
        self._frame_stack_size, self._slots, self._timeout = frame_stack_size, slots, float(timeout)
        self.connect()

    def _new_receiver(self) -> MerlinReceiver:
        return MerlinReceiver(self._data_host, self._data_port, drain=self._drain,
                              frame_stack_size=self._frame_stack_size, slots=self._slots, timeout=self._timeout)

    def wait_for_acquisition(self, timeout: float | None = None) -> MerlinPendingAcquisition | None:
        """Wait up to ``timeout`` s (None: forever) for the next acquisition's header; None on timeout."""
        header = self.connect().wait_for_header(timeout)
        return None if header is None else MerlinPendingAcquisition(header)

    @contextmanager
    def control(self) -> Iterator[MerlinControl]:
        with MerlinControl(host=self._api_host, port=self._api_port) as c:
            yield c

    def read_sig_shape(self) -> tuple[int, int]:
        with self.control() as c:
            return int(c.get("IMAGEY")), int(c.get("IMAGEX"))

    def read_bitdepth(self) -> int:
        with self.control() as c:
            return int(c.get("COUNTERDEPTH"))

    def read_dtype(self) -> np.dtype:
        depth = self.read_bitdepth()
        if depth not in DTYPES:
            raise DataSetException(f"Merlin at {self._api_host}:{self._api_port} reports counter depth {depth}; "
                                   f"expected one of {sorted(DTYPES)}")
        return DTYPES[depth]

    def get_active_controller(self, **kwargs: Any) -> MerlinActiveController:
        return MerlinActiveController()

    # -- the common live-connection protocol (raytile.live.connection) ---------------------
    def acquisition_geometry(self, pending: MerlinPendingAcquisition | None) -> tuple[tuple[int, ...], np.dtype]:
        """Signal shape and dtype, from the control port."""
        self._sig_shape = self.read_sig_shape()
        return self._sig_shape, self.read_dtype()

    def _frames(self, pending: MerlinPendingAcquisition | None, controller: Any, nav_shape: tuple[int, ...],
                ready: Callable[[], None], count: int | None, dtype: np.dtype,
                af: AcquisitionFrames) -> Iterator[np.ndarray]:
        """The acquisition's frame stacks (and its :class:`~raytile.live.receiver.AcquisitionStats`); in
        active mode it first calls ``ready`` (the hook) and waits for the header."""
        if pending is None:
            receiver = self.connect()
            ready()
            header = receiver.wait_for_header(self._timeout)
            if header is None:
                raise AcquisitionError(f"Merlin {receiver.address}: no acquisition started within "
                                       f"{self._timeout:g} s of on_ready_for_data")
            if count is not None and header.nimages and header.nimages < count:
                self.close()  # its frames are not read: the next run reconnects (LiberTEM-live's recovery)
                raise AcquisitionCancelled(f"Merlin {receiver.address}: the acquisition has {header.nimages} "
                                           f"images, nav_shape needs {count}: the run is cancelled")
        yield from self.receiver.frames(count, dtype, batch=af.batch, stats=af.stats)


class MerlinConnectionBuilder:
    """``LiveContext.make_connection("merlin")``; :meth:`open` connects."""

    def open(self, *, api_host: str = "127.0.0.1", api_port: int = 6341, data_host: str = "127.0.0.1",
             data_port: int = 6342, drain: bool = False, recovery_strategy: str = "immediate_reconnect",
             huge_pages: bool = False, **kwargs: Any) -> MerlinDetectorConnection:
        return MerlinDetectorConnection(api_host=api_host, api_port=api_port, data_host=data_host,
                                        data_port=data_port, drain=drain, recovery_strategy=recovery_strategy,
                                        huge_pages=huge_pages, **kwargs)
