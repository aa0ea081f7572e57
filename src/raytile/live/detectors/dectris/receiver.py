"""`DectrisReceiver`: a DECTRIS ZeroMQ stream (V1 or V2) read into a bounded slab of compressed frames.

A reader thread PULLs messages (:mod:`.stream_v1` JSON multipart, or
:mod:`.stream_v2` CBOR). Each image's compressed bytes are copied into a
preallocated slot of the slab (up to ``frame_stack_size`` frames and
``frame_stack_size * bytes_per_frame`` bytes a slot); the slab, the
hand-over of slots and the consumer's loop are
:class:`~raytile.live.receiver.StackReceiver`'s. The consumer decodes a
whole stack in one call (:func:`raytile.io.bslz4.decode_chunks`) straight
into the arrays it yields. With every slot taken the thread stops reading:
ZeroMQ's receive high-water mark fills, then TCP, and the detector's PUSH
socket blocks (backpressure); memory stays at the slab.

Series ids are checked: an image or series end of a series other than the
one being received (a stale series, e.g. the tail of an aborted one) is
skipped and counted in :attr:`DectrisReceiver.stale_messages`. ZeroMQ does not
report a lost peer, so a series with no message for ``timeout`` seconds
fails with :class:`~raytile.common.errors.AcquisitionError`.

Dropped frames: PUSH/PULL blocks rather than drops, so a frame the detector
did not deliver shows as a gap in the image numbers (or a series that ends
short). With ``on_dropped="zero"`` (default) zero frames take the lost
frames' places, the run goes on, and :attr:`~raytile.live.receiver.StackReceiver.frames_dropped`
counts them; with ``"fail"`` the run ends with an AcquisitionError naming the
count.

>>> rx = DectrisReceiver("tcp://127.0.0.1:9999"); rx.start()       # doctest: +SKIP
>>> series, config = rx.wait_for_header(10.0)                       # doctest: +SKIP
>>> for batch in rx.frames(images_in_series(config)): ...           # (k, h, w) arrays, in order
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np

from raytile.common.errors import AcquisitionError, ConfigValidationError
from raytile.io import bslz4
from raytile.live.detectors.dectris import stream_v2
from raytile.live.detectors.dectris.stream_v1 import CODEC_PLAIN_LZ4, ImageInfo, ImageInfoParser, parse_json
from raytile.live.extra import live_module
from raytile.live.receiver import DROP_POLICIES, End, Event, Failed, Header, Stack, StackReceiver

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


#: bitshuffle's default block size in bytes (``BSHUF_TARGET_BLOCK_SIZE_B``): what its LZ4 encoder uses
#: when asked for block size 0, for 1-, 2- and 4-byte pixels alike.
BSHUF_DEFAULT_BLOCK_BYTES = 8192


def fill_zero_headers(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, nbytes: int) -> int:
    """Give bitshuffle-LZ4 images whose 12-byte header is all zeros the header their data implies: the
    image's ``nbytes`` and bitshuffle's default block size; how many were filled.

    DECTRIS detectors send the filter's header (uncompressed size, block size), as the HDF5 filter
    writes it; the mocked sender of LiberTEM-live's tests (``libertem_dectris``) sends zeros there,
    and LiberTEM-rs's decoder never reads those bytes (it assumes the default block size). A header
    that is not all zeros is left alone and checked by the decoder.
    """
    whole = offsets[sizes >= 12]
    if not len(whole):
        return 0
    heads = buf[whole[:, None] + np.arange(12)]
    zero = whole[~heads.any(axis=1)]
    if len(zero):
        header = np.frombuffer(struct.pack(">QI", nbytes, BSHUF_DEFAULT_BLOCK_BYTES), np.uint8)
        buf[zero[:, None] + np.arange(12)] = header
    return len(zero)


class DectrisReceiver(StackReceiver):
    """Receive a DECTRIS stream from ``uri`` (see the module docstring).

    ``slots`` x ``frame_stack_size`` x ``bytes_per_frame`` bytes is the
    slab (allocated on the first image, touched only as slots are used);
    ``rcvhwm`` ZeroMQ's receive high-water mark in messages; ``timeout``
    the silence in a series after which it fails; ``flush_s`` the latency
    deadline of a partial stack; ``on_dropped`` what lost frames do
    (``"zero"`` or ``"fail"``, see the module docstring); ``channel`` the
    stream V2 threshold channel to read (None: the first).
    """

    def __init__(self, uri: str, frame_stack_size: int = 24, slots: int = 64, bytes_per_frame: int = 1 << 16,
                 timeout: float = 10.0, flush_s: float = 0.05, rcvhwm: int = 256, stream_format: str = "legacy",
                 on_dropped: str = "zero", channel: str | None = None):
        if stream_format not in STREAM_FORMATS:
            raise ConfigValidationError(f"dectris receiver: parameter 'stream_format' must be one of "
                                        f"{STREAM_FORMATS}, got {stream_format!r}")
        if on_dropped not in DROP_POLICIES:
            raise ConfigValidationError(f"dectris receiver: parameter 'on_dropped' must be one of {DROP_POLICIES}, "
                                        f"got {on_dropped!r}")
        super().__init__(frame_stack_size, slots, timeout, flush_s)
        self.uri, self.stream_format, self.on_dropped = uri, stream_format, on_dropped
        #: Stream V2: the threshold channel read (e.g. ``"threshold_2"``); None: the first.
        self.channel = channel
        self.what = f"DECTRIS {uri}"
        self._image_info = ImageInfoParser(self.what)  # the images' layouts, parsed once each
        self._bpf, self._rcvhwm = bytes_per_frame, rcvhwm
        self._context: Any = None
        self._wanted: int | None = None  # active mode: the armed series
        #: Messages of a series other than the one being received: skipped.
        self.stale_messages = 0

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> Any:
        zmq = live_module("zmq", "the DECTRIS receiver")
        self._context = zmq.Context()
        sock = self._context.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.uri)
        except zmq.ZMQError as e:
            sock.close()
            self._context.term()
            self._context = None
            raise AcquisitionError(f"DECTRIS data stream {self.uri}: cannot connect ({e})") from e
        return sock

    def _disconnect(self) -> None:
        if self._context is not None:
            self._context.term()
        self._context = None

    # -- consumer side ---------------------------------------------------------------------
    def expect_series(self, series: int | None) -> None:
        """Active mode: accept only ``series`` (what ``arm`` returned); None: the next one sent."""
        self._wanted = series

    def wait_for_header(self, timeout: float | None, series: Any = None) -> tuple[int, dict] | None:
        """``(series, detector config)`` of the next series (of ``series`` if given), or None after
        ``timeout`` s. Stacks of a series nobody read, and other series' headers, are dropped here."""
        accept = None if series is None else (lambda info: info[0] == series)
        found: tuple[int, dict] | None = super().wait_for_header(timeout, accept)
        return found

    def _skipped_header(self, info: Any) -> None:
        self.stale_messages += 1

    def _short_message(self, event: Event, got: int, count: int | None) -> str:
        if isinstance(event, Header):
            return (f"DECTRIS {self.uri}: series {event.info[0]} started after {got} of {count} frames of the "
                    f"series being received")
        assert isinstance(event, End)
        return f"DECTRIS {self.uri}: series {event.info} ended after {got} of {count} frames"

    def _layout_geometry(self, layout: ImageInfo) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(layout.sig_shape), layout.dtype

    def _decode_into(self, stack: Stack, start: int, stop: int, out: np.ndarray) -> None:
        slab = self._slab
        assert slab is not None
        info: ImageInfo = stack.layout
        k, slot = stop - start, stack.slot
        direct = out.dtype == info.dtype and out.flags.c_contiguous
        rows = out.reshape(k, -1).view(np.uint8) if direct else np.empty((k, info.nbytes), np.uint8)
        offsets, sizes = slab.offsets[slot, start:stop], slab.sizes[slot, start:stop]
        missing = slab.missing[slot, start:stop]
        buf = slab.memory[slot]
        if info.codec == CODEC_PLAIN_LZ4:
            self._decode_lz4(buf, offsets, sizes, missing, info, rows)
        else:
            if info.codec != bslz4.CODEC_RAW:
                bslz4.check_decoder()
            if info.codec == bslz4.CODEC_BSLZ4:
                fill_zero_headers(buf, offsets[~missing], sizes[~missing], info.nbytes)
            if missing.any():  # lost frames are zeros; the others are decoded together
                present = ~missing
                part = np.empty((int(present.sum()), info.nbytes), np.uint8)
                self._decode_chunks(buf, offsets[present], sizes[present], info, part)
                rows[missing] = 0
                rows[present] = part
            else:
                self._decode_chunks(buf, offsets, sizes, info, rows)
        if not direct:
            np.copyto(out, rows.view(info.dtype).reshape((k,) + info.sig_shape), casting="unsafe")

    def _decode_chunks(self, buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, info: ImageInfo,
                       rows: np.ndarray) -> None:
        status = bslz4.decode_chunks(buf, offsets, sizes, np.zeros(len(offsets), np.bool_), info.codec,
                                     info.dtype.itemsize, rows)
        if status != 0:
            i, what = bslz4.split_status(status)
            raise AcquisitionError(f"DECTRIS {self.uri}: image {i} of a stack does not decode: {what}")

    def _decode_lz4(self, buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, missing: np.ndarray,
                    info: ImageInfo, rows: np.ndarray) -> None:
        import lz4.block

        for i in range(len(offsets)):
            if missing[i]:
                rows[i] = 0
                continue
            try:
                plain = lz4.block.decompress(buf[offsets[i]:offsets[i] + sizes[i]], uncompressed_size=info.nbytes)
            except Exception as e:
                raise AcquisitionError(f"DECTRIS {self.uri}: an LZ4 image does not decode ({e})") from None
            if len(plain) != info.nbytes:
                raise AcquisitionError(f"DECTRIS {self.uri}: an LZ4 image decodes to {len(plain)} bytes, "
                                       f"{info.nbytes} expected")
            rows[i] = np.frombuffer(plain, np.uint8)

    # -- reader thread -----------------------------------------------------------------------
    def _read(self, sock: Any) -> None:
        """Messages are read part by part, as LiberTEM-rs does: senders differ in which parts they send
        as one multipart message (the header and the detector config may come as two messages)."""
        self._sock = sock
        self._series: int | None = None  # the series being received
        self._expected = self._in_series = 0
        try:
            while not self._stop.is_set():
                head = self._next_part()
                if head is None:
                    continue
                if self.stream_format == "cbor":
                    self._message_v2(head)
                else:
                    self._message(head)
        finally:
            sock.close()

    def _next_part(self) -> Any:
        """The next message part (a zmq.Frame), or None when the receiver is stopping. Waiting, it
        flushes an open stack after ``flush_s`` (the latency deadline) and fails after ``timeout`` s
        of silence inside a series."""
        import zmq

        try:  # the common case under load: a part is waiting (no poll call)
            return self._sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass
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
            self._on_image(series, head.get("frame"), self._image_info(rest[0].buffer), rest[1].buffer)
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
        kind, series, image_id, payload = stream_v2.parse_message(part.buffer, f"DECTRIS {self.uri}", self.channel)
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
        self._post(Header((series, config)))

    def _on_image(self, series: Any, frame: Any, info: ImageInfo, data: Any) -> None:
        if frame != self._in_series:
            if not isinstance(frame, int) or frame < self._in_series:
                raise AcquisitionError(f"DECTRIS {self.uri}: series {series} sent frame {frame} where frame "
                                       f"{self._in_series} was expected (frames reordered or repeated)")
            if not self._dropped(info, frame - self._in_series, f"frames {self._in_series} to {frame - 1}"):
                return
        self._store(info, data)
        self._in_series += 1

    def _dropped(self, info: ImageInfo, n: int, which: str) -> bool:
        """``n`` frames of the series were not delivered: zeros in their place, or a failure."""
        if self.on_dropped == "fail":  # the run fails; the connection goes on with the next series
            self.frames_dropped += n
            self._flush()
            self._post(Failed(AcquisitionError(f"DECTRIS {self.uri}: series {self._series} lost {n} frame(s) "
                                               f"({which}); the connection's on_dropped='fail'"), fatal=False))
            self._series = None  # the rest of the series is skipped (as stale)
            return False
        self._ensure_slab(self._stack * self._bpf)
        self._lost_frames(info, n)
        self._in_series += n
        return True

    def _on_end(self, series: Any) -> None:
        if series != self._series or self._series is None:
            self.stale_messages += 1
            return
        if self._expected and self._in_series < self._expected and self._open_layout is not None:
            if not self._dropped(self._open_layout, self._expected - self._in_series,
                                 f"the last {self._expected - self._in_series}"):
                return
        self._flush()
        self._post(End(self._series))
        self._series = None

    def _store(self, info: ImageInfo, data: Any) -> None:
        slab = self._ensure_slab(self._stack * self._bpf)
        n = len(data)
        if n > slab.slot_bytes:
            raise AcquisitionError(f"DECTRIS {self.uri}: an image of {n} bytes does not fit a receive slot of "
                                   f"{slab.slot_bytes} bytes; open the connection with a larger bytes_per_frame")
        target = self._open_frame(info, n)
        target[:] = data
        self._frame_done()
