"""`DectrisReceiver`: a DECTRIS ZeroMQ stream (V1) read into a bounded slab of compressed frames.

A reader thread PULLs multipart messages (:mod:`.stream_v1`). Each image's
compressed bytes are copied into a preallocated slot of the slab (up to
``frame_stack_size`` frames and ``frame_stack_size * bytes_per_frame``
bytes a slot); a full slot, the series' end, an image of another layout, or
``flush_s`` without a message hands the slot to the consumer, which decodes
the stack (:func:`raytile.io.bslz4.decode_chunks`, one call a stack) into a
fresh ``(k, h, w)`` array and gives the slot back. With every slot taken the
thread stops reading: ZeroMQ's receive high-water mark fills, then TCP, and
the detector's PUSH socket blocks (backpressure); memory stays at the slab.

Series ids are checked: an image or series end of a series other than the
one being received (a stale series, e.g. the tail of an aborted one) is
skipped and counted in :attr:`DectrisReceiver.stale_messages`. ZeroMQ does not
report a lost peer, so a series with no message for ``timeout`` seconds
fails with :class:`~raytile.common.errors.AcquisitionError`.

>>> rx = DectrisReceiver("tcp://127.0.0.1:9999"); rx.start()       # doctest: +SKIP
>>> series, config = rx.wait_for_header(10.0)                       # doctest: +SKIP
>>> for batch in rx.frames(config["nimages"] * config["ntrigger"]): ...   # (k, h, w) arrays, in order
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Union

import numpy as np

from raytile.common.errors import AcquisitionError, ConfigValidationError, DataSetException
from raytile.io import bslz4
from raytile.live.detectors.dectris import stream_v2
from raytile.live.detectors.dectris.stream_v1 import CODEC_PLAIN_LZ4, ImageInfo, parse_image_info, parse_json

__all__ = ["DectrisReceiver", "images_in_series", "STREAM_FORMATS"]

#: SIMPLON's stream ``format`` values: ``legacy`` (stream V1, JSON multipart), ``cbor`` (stream V2).
STREAM_FORMATS = ("legacy", "cbor")


def images_in_series(config: dict) -> int:
    """Images a series of this detector configuration sends (0: unknown): one per trigger for
    ``exte``/``inte``, ``nimages`` per trigger for ``exts``/``ints`` (as LiberTEM-rs counts)."""
    ntrigger = int(config.get("ntrigger", 1))
    if str(config.get("trigger_mode", "exts")) in ("exte", "inte"):
        return ntrigger
    return int(config.get("nimages", 0)) * ntrigger


@dataclass(frozen=True)
class _Header:
    series: int
    config: dict


@dataclass(frozen=True)
class _Stack:
    slot: int
    count: int
    info: ImageInfo


@dataclass(frozen=True)
class _End:
    series: int


@dataclass(frozen=True)
class _Failed:
    error: DataSetException


_Event = Union[_Header, _Stack, _End, _Failed]


class DectrisReceiver:
    """Receive a DECTRIS stream from ``uri`` (see the module docstring).

    ``slots`` x ``frame_stack_size`` x ``bytes_per_frame`` bytes is the
    slab (allocated on the first image, touched only as slots are used);
    ``rcvhwm`` ZeroMQ's receive high-water mark in messages; ``timeout``
    the silence in a series after which it fails; ``flush_s`` the latency
    deadline of a partial stack.
    """

    def __init__(self, uri: str, frame_stack_size: int = 24, slots: int = 64, bytes_per_frame: int = 1 << 16,
                 timeout: float = 10.0, flush_s: float = 0.05, rcvhwm: int = 256, stream_format: str = "legacy"):
        if stream_format not in STREAM_FORMATS:
            raise ConfigValidationError(f"dectris receiver: parameter 'stream_format' must be one of "
                                        f"{STREAM_FORMATS}, got {stream_format!r}")
        self.uri, self.stream_format = uri, stream_format
        self._stack, self._slots, self._bpf = frame_stack_size, slots, bytes_per_frame
        self._timeout, self._flush_s, self._rcvhwm = timeout, flush_s, rcvhwm
        self._events: queue.Queue[_Event] = queue.Queue()
        self._free: queue.LifoQueue[int] = queue.LifoQueue()  # LIFO: the same few slots stay hot
        self._memory: np.ndarray | None = None
        self._offsets = np.zeros((slots, frame_stack_size), np.int64)
        self._sizes = np.zeros((slots, frame_stack_size), np.int64)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._context: Any = None
        self._wanted: int | None = None  # active mode: the armed series
        self.frames_received = 0
        #: Messages of a series other than the one being received: skipped.
        self.stale_messages = 0
        #: ``(frames received so far, time.monotonic())`` when each stack was handed on.
        self.arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=100_000)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        import zmq

        self._context = zmq.Context()
        sock = self._context.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.uri)
        except zmq.ZMQError as e:
            sock.close()
            self._context.term()
            raise AcquisitionError(f"DECTRIS data stream {self.uri}: cannot connect ({e})") from e
        self._thread = threading.Thread(target=self._read_loop, args=(sock,), name=f"dectris-rx-{self.uri}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._context is not None:
            self._context.term()
        self._thread = self._context = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def slab_bytes(self) -> int:
        """Bytes the slab holds (0 before the first image): the receive side's memory bound."""
        return 0 if self._memory is None else self._memory.nbytes

    # -- consumer side ------------------------------------------------------------------
    def expect_series(self, series: int | None) -> None:
        """Active mode: accept only ``series`` (what ``arm`` returned); None: the next one sent."""
        self._wanted = series

    def wait_for_header(self, timeout: float | None, series: int | None = None) -> tuple[int, dict] | None:
        """``(series, detector config)`` of the next series (of ``series`` if given), or None after
        ``timeout`` s. Stacks of a series nobody read, and other series' headers, are dropped here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(event, _Header):
                if series is None or event.series == series:
                    return event.series, event.config
                self.stale_messages += 1
            elif isinstance(event, _Stack):
                self._free.put(event.slot)
            elif isinstance(event, _Failed):
                raise event.error

    def frames(self, count: int, dtype: Any = None) -> Iterator[np.ndarray]:
        """Decoded stacks ``(k, h, w)`` (of ``dtype``, default the stream's) until ``count`` frames;
        AcquisitionError when the series fails, goes silent or ends short."""
        got = 0
        while got < count:
            try:
                event = self._events.get(timeout=self._timeout + 1.0)
            except queue.Empty:
                raise AcquisitionError(f"DECTRIS {self.uri}: no frame for {self._timeout + 1.0:g} s after {got} "
                                       f"of {count} frames") from None
            if isinstance(event, _Failed):
                raise event.error
            if isinstance(event, _End):
                raise AcquisitionError(f"DECTRIS {self.uri}: series {event.series} ended after {got} of {count} "
                                       f"frames")
            if isinstance(event, _Header):
                raise AcquisitionError(f"DECTRIS {self.uri}: series {event.series} started after {got} of "
                                       f"{count} frames of the series being received")
            try:
                batch = self._decode(event)
            finally:
                self._free.put(event.slot)
            if dtype is not None and batch.dtype != np.dtype(dtype):
                batch = batch.astype(dtype)
            batch = batch[:count - got]
            got += len(batch)
            yield batch

    def _decode(self, stack: _Stack) -> np.ndarray:
        assert self._memory is not None
        info, k, slot = stack.info, stack.count, stack.slot
        out = np.empty((k, info.nbytes), np.uint8)
        offsets, sizes = self._offsets[slot, :k], self._sizes[slot, :k]
        buf = self._memory[slot]
        if info.codec == CODEC_PLAIN_LZ4:
            import lz4.block
            for i in range(k):
                try:
                    plain = lz4.block.decompress(buf[offsets[i]:offsets[i] + sizes[i]], uncompressed_size=info.nbytes)
                except Exception as e:
                    raise AcquisitionError(f"DECTRIS {self.uri}: an LZ4 image does not decode ({e})") from None
                if len(plain) != info.nbytes:
                    raise AcquisitionError(f"DECTRIS {self.uri}: an LZ4 image decodes to {len(plain)} bytes, "
                                           f"{info.nbytes} expected")
                out[i] = np.frombuffer(plain, np.uint8)
        else:
            if info.codec != bslz4.CODEC_RAW:
                bslz4.check_decoder()
            status = bslz4.decode_chunks(buf, offsets, sizes, np.zeros(k, np.bool_), info.codec,
                                         info.dtype.itemsize, out)
            if status != 0:
                i, what = bslz4.split_status(status)
                raise AcquisitionError(f"DECTRIS {self.uri}: image {i} of a stack does not decode: {what}")
        return out.view(info.dtype).reshape((k,) + info.sig_shape)

    # -- reader thread ------------------------------------------------------------------
    def _read_loop(self, sock: Any) -> None:
        try:
            self._read(sock)
        except DataSetException as e:
            self._events.put(_Failed(e))
        except Exception as e:  # a bug or a ZeroMQ failure: the consumer must hear of it
            if not self._stop.is_set():
                self._events.put(_Failed(AcquisitionError(f"DECTRIS {self.uri}: receiver failed: "
                                                          f"{type(e).__name__}: {e}")))
        finally:
            sock.close()

    def _read(self, sock: Any) -> None:
        """Messages are read part by part, as LiberTEM-rs does: senders differ in which parts they send
        as one multipart message (the header and the detector config may come as two messages)."""
        self._sock = sock
        self._series: int | None = None  # the series being received
        self._expected = self._in_series = 0
        self._open: int | None = None
        self._open_count = self._open_bytes = 0
        self._open_info: ImageInfo | None = None
        while not self._stop.is_set():
            head = self._next_part()
            if head is None:
                continue
            if self.stream_format == "cbor":
                self._message_v2(head)
            else:
                self._message(head)

    def _next_part(self) -> Any:
        """The next message part (a zmq.Frame), or None when the receiver is stopping. Waiting, it
        flushes an open stack after ``flush_s`` (the latency deadline) and fails after ``timeout`` s
        of silence inside a series."""
        import zmq

        poll_ms = max(1, int(min(self._flush_s, 0.1) * 1000))
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            if self._sock.poll(poll_ms, zmq.POLLIN):
                return self._sock.recv(copy=False)
            if self._open_count:
                self._flush()
            if self._series is not None and time.monotonic() - quiet_since > self._timeout:
                raise AcquisitionError(f"DECTRIS {self.uri}: no message for {self._timeout:g} s in series "
                                       f"{self._series} ({self._in_series} of {self._expected or '?'} frames); "
                                       f"the detector stopped sending")
        return None

    def _parts(self, n: int) -> list[Any] | None:
        parts = []
        for _ in range(n):
            part = self._next_part()
            if part is None:
                return None
            parts.append(part)
        return parts

    def _message(self, head_part: Any) -> None:
        what = f"DECTRIS {self.uri}"
        try:
            head = parse_json(head_part.buffer, what)
        except AcquisitionError:
            self.stale_messages += 1  # not a message head (e.g. the tail of a message begun before we connected)
            return
        htype, series = str(head.get("htype", "")), head.get("series")
        if htype.startswith("dimage-"):
            rest = self._parts(3)  # dimage_d, data, dconfig
            if rest is None:
                return
            if series != self._series or self._series is None:
                self.stale_messages += 1
                return
            self._on_image(series, head.get("frame"), parse_image_info(rest[0].buffer, what), rest[1].buffer)
        elif htype.startswith("dheader-"):
            config: dict = {}
            if head.get("header_detail", "basic") != "none":
                rest = self._parts(1)
                if rest is None:
                    return
                config = parse_json(rest[0].buffer, what)
            self._on_header(series, config)
        elif htype.startswith("dseries_end-"):
            self._on_end(series)
        else:
            self.stale_messages += 1  # a part this reader does not know (e.g. a config without its header)

    def _message_v2(self, part: Any) -> None:
        """One stream V2 (CBOR) message."""
        kind, series, image_id, payload = stream_v2.parse_message(part.buffer, f"DECTRIS {self.uri}")
        if kind == "start":
            self._on_header(series, payload)
        elif kind == "image":
            if series != self._series or self._series is None:
                self.stale_messages += 1
                return
            self._on_image(series, image_id, payload[0], payload[1])
        elif kind == "end":
            self._on_end(series)
        else:
            self.stale_messages += 1

    def _on_header(self, series: Any, config: dict) -> None:
        if not isinstance(series, int) or (self._wanted is not None and series != self._wanted):
            self.stale_messages += 1
            return
        if self._series is not None:
            self._flush()
        self._series, self._in_series = series, 0
        self._expected = images_in_series(config)
        self._events.put(_Header(series, config))

    def _on_image(self, series: Any, frame: Any, info: ImageInfo, data: Any) -> None:
        if frame != self._in_series:
            raise AcquisitionError(f"DECTRIS {self.uri}: series {series} sent frame {frame} where frame "
                                   f"{self._in_series} was expected (frames lost or reordered)")
        self._store(info, data)
        self._in_series += 1
        self.frames_received += 1

    def _on_end(self, series: Any) -> None:
        if series != self._series or self._series is None:
            self.stale_messages += 1
            return
        self._flush()
        self._events.put(_End(self._series))
        self._series = None

    def _store(self, info: ImageInfo, data: Any) -> None:
        n = len(data)
        slot_bytes = self._stack * self._bpf
        if n > slot_bytes:
            raise AcquisitionError(f"DECTRIS {self.uri}: an image of {n} bytes does not fit a receive slot of "
                                   f"{slot_bytes} bytes; open the connection with a larger bytes_per_frame")
        if self._open is not None and (info != self._open_info or self._open_bytes + n > slot_bytes):
            self._flush()
        if self._open is None:
            if self._memory is None:
                self._memory = np.empty((self._slots, slot_bytes), np.uint8)
                for i in reversed(range(self._slots)):
                    self._free.put(i)
            self._open = self._take_slot()
            self._open_info, self._open_count, self._open_bytes = info, 0, 0
        assert self._memory is not None and self._open is not None
        self._memory[self._open, self._open_bytes:self._open_bytes + n] = np.frombuffer(data, np.uint8)
        self._offsets[self._open, self._open_count] = self._open_bytes
        self._sizes[self._open, self._open_count] = n
        self._open_bytes += n
        self._open_count += 1
        if self._open_count == self._stack:
            self._flush()

    def _take_slot(self) -> int:
        """A free slot; waits while the consumer holds them all (the socket is not read meanwhile)."""
        while True:
            try:
                return self._free.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    raise AcquisitionError(f"DECTRIS {self.uri}: receiver closed") from None

    def _flush(self) -> None:
        if self._open is not None and self._open_count:
            assert self._open_info is not None
            self._events.put(_Stack(self._open, self._open_count, self._open_info))
            self.arrivals.append((self.frames_received, time.monotonic()))
            self._open = None
            self._open_count = self._open_bytes = 0
