"""An ASI Timepix3 data connection (passive mode), its pending acquisitions, LiberTEM-live's parameters.

>>> with LiveContext().make_connection("asi_tpx3").open(data_port=8283) as conn:   # doctest: +SKIP
...     pending = conn.wait_for_acquisition(10.0)          # the next scan Accos starts
...     aq = ctx.make_acquisition(conn=conn, pending_aq=pending)   # nav_shape: the header's
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.live.connection import ReceiverConnection, check_port, check_positive_int
from raytile.live.detectors.asi_tpx3.receiver import AsiTpx3Receiver
from raytile.live.detectors.asi_tpx3.wire import AcquisitionStart
from raytile.live.receiver import LIVE_MIN_PARTITIONS_PER_SCAN, AcquisitionFrames, partition_batches

__all__ = ["AsiTpx3ConnectionBuilder", "AsiTpx3DetectorConnection", "AsiTpx3PendingAcquisition", "EventFrames",
           "FRAME_DTYPE", "SPARSE_FRAMES_PER_PARTITION"]

#: What the frames decode to: LiberTEM-live's acquisition declares float32 (the events' value dtype
#: may change from chunk to chunk).
FRAME_DTYPE = np.dtype(np.float32)


#: LiberTEM-live's default frames per partition of an ASI Timepix3 acquisition.
SPARSE_FRAMES_PER_PARTITION = 4096


class EventFrames(AcquisitionFrames):
    """An acquisition's frames as scipy CSR batches ``(k, pixels)`` (a
    :class:`~raytile.io.formats.stream.CSRSource`): the stream keeps them sparse, and sets
    ``csr_batches`` False when it needs dense frames (a ``preprocess``)."""

    def __init__(self, make: Callable[[AcquisitionFrames], Iterator[Any]], batch: tuple[int, int] | None = None):
        super().__init__(make, batch)
        self.csr_batches = True


class AsiTpx3PendingAcquisition:
    """A scan the detector software started: its header (``nav_shape``, ``sig_shape``, index dtypes)."""

    def __init__(self, header: AcquisitionStart):
        self._header = header

    @property
    def header(self) -> AcquisitionStart:
        return self._header

    @property
    def nimages(self) -> int:
        return self._header.nimages

    @property
    def nav_shape(self) -> tuple[int, ...]:
        return tuple(self._header.nav_shape)

    def __repr__(self) -> str:
        return f"<AsiTpx3PendingAcquisition header={self._header}>"


class AsiTpx3DetectorConnection(ReceiverConnection[AsiTpx3Receiver]):
    """A data connection to the ASI Timepix3 software (Accos), kept open across acquisitions.

    Passive mode only, as LiberTEM-live's: the detector software starts
    acquisitions, :meth:`wait_for_acquisition` waits for the next scan's header.
    Parameters as LiberTEM-live's: ``data_host``/``data_port`` (8283),
    ``buffer_size`` (MiB: the receive slab, its memory bound), ``bytes_per_chunk``
    and ``chunks_per_stack`` (a receive slot holds ``chunks_per_stack`` chunks
    of about ``bytes_per_chunk`` bytes), ``huge_pages`` (accepted; raytile's
    slab is ordinary memory). raytile's own: ``timeout`` (seconds of silence
    inside a scan before the run fails).
    """

    detector = "asi_tpx3"

    def __init__(self, *, data_host: str = "127.0.0.1", data_port: int = 8283, buffer_size: int = 2048,
                 bytes_per_chunk: int | None = None, chunks_per_stack: int = 24, huge_pages: bool = False,
                 timeout: float = 10.0):
        check_port(self.detector, "data_port", data_port)
        check_positive_int(self.detector, "buffer_size", buffer_size)
        check_positive_int(self.detector, "chunks_per_stack", chunks_per_stack)
        bytes_per_chunk = 16 * 1024 if bytes_per_chunk is None else bytes_per_chunk
        check_positive_int(self.detector, "bytes_per_chunk", bytes_per_chunk)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigValidationError(f"asi_tpx3 connection: parameter 'timeout' must be a positive number of "
                                        f"seconds, got {timeout!r}")
        self._data_host, self._data_port = data_host, data_port
        self._buffer_size, self._bytes_per_chunk = buffer_size, bytes_per_chunk
        self._chunks_per_stack, self._huge_pages, self._timeout = chunks_per_stack, huge_pages, float(timeout)
        self.connect()

    def _new_receiver(self) -> AsiTpx3Receiver:
        return AsiTpx3Receiver(self._data_host, self._data_port, chunks_per_stack=self._chunks_per_stack,
                               slot_bytes=self._bytes_per_chunk * self._chunks_per_stack,
                               buffer_bytes=self._buffer_size * 2**20, timeout=self._timeout, dtype=FRAME_DTYPE)

    def connect(self) -> AsiTpx3Receiver:
        """The receiver: the running one, or one that ended but holds events nobody read (a scan's
        header and chunks, the error that ended it: what comes next is read from it), else a new one."""
        receiver = self._receiver
        if receiver is not None and not receiver.running and receiver.has_unread:
            return receiver
        return super().connect()

    def wait_for_acquisition(self, timeout: float | None = None) -> AsiTpx3PendingAcquisition | None:
        """Wait up to ``timeout`` s (None: forever) for the next scan's header; None on timeout. If the
        data connection ended, what it received first (a header, or the AcquisitionError that ended it,
        raised here), then a new connection."""
        receiver = self.connect()
        if not receiver.running:
            header = receiver.wait_for_header(0)
            if header is not None:
                return AsiTpx3PendingAcquisition(header)
            receiver = self.connect()
        header = receiver.wait_for_header(timeout)
        return None if header is None else AsiTpx3PendingAcquisition(header)

    def reconnect(self) -> None:
        """Close the data connection and open a new one (LiberTEM-live's)."""
        self.close()
        self.connect()

    def get_active_controller(self, **kwargs: Any) -> Any:
        """No active mode (as in LiberTEM-live): ConfigValidationError saying to wait for an acquisition."""
        raise ConfigValidationError("asi_tpx3: only passive mode is supported (as in LiberTEM-live): pass "
                                    "make_acquisition(pending_aq=conn.wait_for_acquisition(...))")

    # -- the common live-connection protocol (raytile.live.connection) ---------------------
    def acquisition_geometry(self, pending: AsiTpx3PendingAcquisition | None) -> tuple[tuple[int, ...], np.dtype]:
        """The header's frame shape; frames are float32, as LiberTEM-live's acquisition declares."""
        if pending is None:
            self.get_active_controller()
        assert pending is not None
        self._sig_shape = tuple(pending.header.sig_shape)
        return self._sig_shape, FRAME_DTYPE

    def acquisition_frames(self, pending: Any, controller: Any, nav_shape: tuple[int, ...],
                           ready: Callable[[], None], count: int | None, dtype: np.dtype) -> AcquisitionFrames:
        """The acquisition's frames as scipy CSR batches (:class:`EventFrames`)."""
        return EventFrames(lambda af: self._frames(pending, controller, nav_shape, ready, count, dtype, af),
                           partition_batches(nav_shape, self._sig_shape, dtype))

    def sparse_frames_per_partition(self, nav_shape: tuple[int, ...]) -> int:
        """The default partition size of a sparse acquisition: LiberTEM-live's 4096 frames, and at least
        :data:`~raytile.live.receiver.LIVE_MIN_PARTITIONS_PER_SCAN` partitions a scan (a partition of
        events is small; the dense default, ~32 MiB of float32 frames, is 32 frames of 512x512)."""
        per_scan = math.ceil(math.prod(nav_shape) / LIVE_MIN_PARTITIONS_PER_SCAN)
        return max(1, min(SPARSE_FRAMES_PER_PARTITION, per_scan))

    def _frames(self, pending: AsiTpx3PendingAcquisition | None, controller: Any, nav_shape: tuple[int, ...],
                ready: Callable[[], None], count: int | None, dtype: np.dtype,
                af: AcquisitionFrames) -> Iterator[Any]:
        if getattr(af, "csr_batches", False):
            yield from self.receiver.csr_frames(count, dtype, batch=af.batch, stats=af.stats)
        else:  # the stream wants dense frames (a preprocess takes them)
            yield from self.receiver.frames(count, dtype, batch=af.batch, stats=af.stats)


class AsiTpx3ConnectionBuilder:
    """``LiveContext.make_connection("asi_tpx3")``; :meth:`open` connects."""

    def open(self, data_host: str = "127.0.0.1", data_port: int = 8283, buffer_size: int = 2048,
             bytes_per_chunk: int | None = None, chunks_per_stack: int = 24, huge_pages: bool = False,
             **kwargs: Any) -> AsiTpx3DetectorConnection:
        return AsiTpx3DetectorConnection(data_host=data_host, data_port=data_port, buffer_size=buffer_size,
                                         bytes_per_chunk=bytes_per_chunk, chunks_per_stack=chunks_per_stack,
                                         huge_pages=huge_pages, **kwargs)
