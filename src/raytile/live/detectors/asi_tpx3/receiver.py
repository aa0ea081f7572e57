"""`AsiTpx3Receiver`: the ASI Timepix3 event stream read into a bounded slab of CSR chunks.

A reader thread takes messages (:mod:`raytile.live.detectors.asi_tpx3.wire`)
off the TCP socket and writes each chunk's CSR payload straight into the open
slot of the slab, up to ``chunks_per_stack`` chunks a slot (LiberTEM-live's
chunk stacks); a slot is handed on when full, at a scan's end, or after
``flush_s`` without data (the latency deadline). With every slot taken the
reader stops reading the socket: TCP holds the sender back, and the receive
memory stays at the slab's size (a chunk larger than a slot makes the slots
larger, fewer of them). Events reach the consumer in arrival order: a
:class:`~raytile.live.receiver.Header` at each ``ScanStart`` (with the
acquisition's header, as LiberTEM-rs reports it), stacks of chunks, an
:class:`~raytile.live.receiver.End` at ``ScanEnd`` (or an ``AcquisitionEnd``
that cuts a scan short).

The consumer (:meth:`AsiTpx3Receiver.csr_frames`) copies the events of a
batch of frames out of the slab into a ``scipy.sparse.csr_matrix`` ``(k,
pixels)``, what LiberTEM-live's tiles are; the stream keeps it sparse (see
io/formats/stream.py). :meth:`StackReceiver.frames` decodes into dense
arrays instead (for a ``preprocess`` that takes dense frames): each frame is
zeroed and its events added at their pixels (duplicated pixel indices add
up, as scipy's CSR does when made dense). The
sender closing the connection inside a scan, a malformed message, an index
outside the frame, or ``timeout`` seconds of silence inside a scan end the run
with an :class:`~raytile.common.errors.AcquisitionError` naming the address.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
import time
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import AcquisitionError
from raytile.live.detectors.asi_tpx3.wire import (
    HEADER_BYTES, AcquisitionEnd, AcquisitionStart, ArrayChunk, ScanEnd, ScanStart, parse_header,
)
from raytile.live.receiver import AcquisitionStats, End, Failed, Header, SocketStackReceiver, Stack, _batch_size

__all__ = ["AsiTpx3Receiver", "ChunkPlace", "SlotLayout"]


@dataclass(frozen=True)
class ChunkPlace:
    """Where a chunk lies in its slot: at byte ``offset``, frames ``first:first + nframes`` of the stack."""

    offset: int
    first: int
    chunk: ArrayChunk


@dataclass(frozen=True)
class SlotLayout:
    """The chunks of a slot, in frame order, and their acquisition's header (sig shape, index dtypes)."""

    start: AcquisitionStart
    chunks: tuple[ChunkPlace, ...]


def _csr(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], frames: int, pixels: int, dtype: np.dtype) -> Any:
    """A scipy CSR matrix ``(frames, pixels)`` of the ``(counts, indices, values)`` parts, in order."""
    import scipy.sparse as sp

    indptr = np.zeros(frames + 1, np.int64)
    if parts:
        np.cumsum(np.concatenate([p[0] for p in parts]), out=indptr[1:])
    nnz = int(indptr[-1])
    idx_dtype = np.int32 if max(nnz, pixels) < 2**31 else np.int64
    indices = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, idx_dtype)
    indices = indices.astype(idx_dtype, copy=False)
    values = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype)
    return sp.csr_matrix((values, indices, indptr.astype(idx_dtype, copy=False)), shape=(frames, pixels))


class _Closed(Exception):
    """The sender closed the connection between messages."""


class AsiTpx3Receiver(SocketStackReceiver):
    """Receive the ASI Timepix3 stream from ``host:port`` (see the module docstring).

    ``chunks_per_stack``: chunks per slot; ``slot_bytes``: a slot's bytes (grown
    to the largest chunk); ``buffer_bytes``: the slab's bytes (its memory bound:
    ``buffer_bytes // slot_bytes`` slots, at least 2); ``timeout``: seconds of
    silence inside a scan before it fails; ``flush_s``: the latency deadline.
    ``dtype``: what frames decode to by default (LiberTEM-live's: float32).
    """

    def __init__(self, host: str, port: int, chunks_per_stack: int = 24, slot_bytes: int = 16 * 1024 * 24,
                 buffer_bytes: int = 2048 * 2**20, timeout: float = 10.0, flush_s: float = 0.05,
                 connect_timeout: float = 10.0, dtype: Any = np.float32):
        self._buffer_bytes, self._slot_bytes = int(buffer_bytes), int(slot_bytes)
        super().__init__(chunks_per_stack, self._slots_for(self._slot_bytes), timeout, flush_s)
        self.address = f"{host}:{port}"
        self.what = f"ASI Timepix3 {self.address}"
        self._host, self._port, self._connect_timeout = host, port, connect_timeout
        self._dtype = np.dtype(dtype)
        self._sock = None
        self._chunks: list[ChunkPlace] = []
        self._start: AcquisitionStart | None = None  # the acquisition being read
        self._open_start: AcquisitionStart | None = None  # the acquisition of the open slot's chunks
        self._scan_frames = 0

    def _slots_for(self, slot_bytes: int) -> int:
        return max(2, self._buffer_bytes // slot_bytes)

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        except OSError as e:
            raise AcquisitionError(f"ASI Timepix3 data port {self.address}: cannot connect ({e})") from e
        sock.settimeout(max(0.01, min(self._flush_s, 0.2)))  # reads wake up to flush and to see close()
        self._sock = sock
        return sock

    # -- consumer side ---------------------------------------------------------------------
    def wait_for_header(self, timeout: float | None, accept: Any = None) -> AcquisitionStart | None:
        """The next scan's acquisition header, or None after ``timeout`` seconds (chunks of scans
        nobody read are dropped here, their slots given back)."""
        header: AcquisitionStart | None = super().wait_for_header(timeout, accept)
        return header

    @property
    def has_unread(self) -> bool:
        """Events the consumer has not taken yet (after the thread ended: what it received last)."""
        return not self._events.empty() or self._carry is not None

    def _layout_geometry(self, layout: SlotLayout) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(layout.start.sig_shape), self._dtype

    def _rows(self, stack: Stack, start: int, stop: int,
              pixels: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Frames ``start:stop`` of a stack, chunk by chunk: ``(first, counts, indices, values)``, the
        chunk's first frame counted from ``start``, its events per frame and views of its events in the
        slab (valid until the slot goes back); AcquisitionError for an indptr that is no row index or
        an event outside the frame."""
        assert self._slab is not None
        layout: SlotLayout = stack.layout
        memory = self._slab.memory[stack.slot]
        for place in layout.chunks:
            chunk = place.chunk
            a, b = max(start, place.first), min(stop, place.first + chunk.nframes)
            if a >= b:
                continue
            ra, rb = a - place.first, b - place.first
            indptr = np.frombuffer(memory, layout.start.indptr_dtype, chunk.nframes + 1, place.offset)
            lo, hi = int(indptr[ra]), int(indptr[rb])
            counts: np.ndarray = np.diff(indptr[ra:rb + 1].astype(np.int64))
            if lo > hi or hi > chunk.nnz or (counts < 0).any():
                raise AcquisitionError(f"{self.what}: a chunk's indptr is not a row index of its {chunk.nnz} "
                                       f"events (rows {ra}..{rb}: {lo}..{hi})")
            indices = np.frombuffer(memory, layout.start.indices_dtype, hi - lo,
                                    place.offset + chunk.indices_offset + lo * layout.start.indices_dtype.itemsize)
            values = np.frombuffer(memory, chunk.value_dtype, hi - lo,
                                   place.offset + chunk.values_offset + lo * chunk.value_dtype.itemsize)
            if len(indices) and int(indices.max()) >= pixels:
                raise AcquisitionError(f"{self.what}: an event at pixel {int(indices.max())}, outside the "
                                       f"{layout.start.sig_shape} frame")
            yield a - start, counts, indices, values

    def _decode_into(self, stack: Stack, start: int, stop: int, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:  # (frames() gives contiguous arrays; the scatter needs one)
            dense = np.empty(out.shape, out.dtype)
            self._decode_into(stack, start, stop, dense)
            out[...] = dense
            return
        out[...] = 0
        flat = out.reshape(-1)
        pixels = int(np.prod(out.shape[1:]))
        for first, counts, indices, values in self._rows(stack, start, stop, pixels):
            at = np.repeat(np.arange(first, first + len(counts), dtype=np.int64) * pixels, counts) + indices
            # add, not assign: a pixel named twice in a frame counts twice (scipy's CSR made dense); with
            # a flat index and the output's dtype numpy's add.at takes its fast path (~10x the 2D form)
            np.add.at(flat, at, values.astype(out.dtype, copy=False))

    def csr_frames(self, count: int | None, dtype: Any = None, batch: tuple[int, int] | None = None,
                   stats: AcquisitionStats | None = None) -> Iterator[Any]:
        """As :meth:`frames`, the frames as scipy CSR matrices ``(k, pixels)`` of ``dtype``: each
        matrix's events are copied out of the slab (its slots go back as soon as a dense frame's
        would), never made dense. Duplicated pixel indices stay as they came (scipy adds them up)."""
        stats = stats if stats is not None else AcquisitionStats()
        got = 0
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # the open matrix's rows so far
        size = filled = 0
        pixels = 0
        held: Stack | None = None
        try:
            while count is None or got < count:
                taken = self._next_stack(got, count)
                if taken is None:
                    break
                held, start = taken
                sig, native = self._layout_geometry(held.layout)
                if parts and pixels != math.prod(sig):
                    raise AcquisitionError(f"{self.what}: the frame shape changed to {sig} inside a batch")
                pixels = math.prod(sig)
                out_dtype = np.dtype(dtype or native)
                want = held.count - start if count is None else min(held.count - start, count - got)
                stop = start + want
                while start < stop:
                    if size == 0:
                        size, filled = _batch_size(got, batch, stop - start), 0
                        if count is not None:
                            size = min(size, count - got)
                    take = min(stop - start, size - filled)
                    for first, counts, indices, values in self._rows(held, start, start + take, pixels):
                        parts.append((counts, indices.astype(np.int32 if pixels < 2**31 else np.int64),
                                      values.astype(out_dtype)))  # copies: the slot goes back
                    assert self._slab is not None
                    stats.frames_dropped += int(self._slab.missing[held.slot, start:start + take].sum())
                    stats.frames += take
                    start, filled, got = start + take, filled + take, got + take
                    if filled == size:
                        done, parts, size = _csr(parts, filled, pixels, out_dtype), [], 0
                        yield done
                if stop < held.count:
                    self._carry, held = (held, stop), None
                else:
                    self._release(held.slot)
                    held = None
            if size and filled:
                yield _csr(parts, filled, pixels, np.dtype(dtype or self._dtype))
        finally:
            if held is not None:
                self._release(held.slot)

    # -- reader thread -----------------------------------------------------------------------
    def _recv(self, view: memoryview, in_scan: bool, at_boundary: bool = False) -> int:
        """Fill ``view``; fewer bytes only if the peer closed. Timeouts flush the open stack at a
        message boundary, and fail after ``timeout`` s of silence inside a scan."""
        assert self._sock is not None
        got, n, quiet_since = 0, len(view), time.monotonic()
        while got < n:
            if self._stop.is_set():
                raise OSError("receiver closed")
            try:
                k = self._sock.recv_into(view[got:], n - got)
            except TimeoutError:
                if at_boundary and got == 0:
                    self._flush()
                if in_scan and time.monotonic() - quiet_since > self._timeout:
                    raise AcquisitionError(f"{self.what}: no data for {self._timeout:g} s in a scan "
                                           f"({self._scan_frames} of {self._scan_total()} frames)") from None
                continue
            if k == 0:
                return got
            got += k
            quiet_since = time.monotonic()
        return got

    def _scan_total(self) -> int | str:
        return self._start.nimages if self._start is not None else "?"

    def _header(self, in_scan: bool) -> Any:
        raw = bytearray(HEADER_BYTES)
        got = self._recv(memoryview(raw), in_scan, at_boundary=True)
        if got == 0:
            raise _Closed()
        if got < HEADER_BYTES:
            raise AcquisitionError(f"{self.what}: the sender closed the connection inside a header")
        return parse_header(bytes(raw), self.what)

    def _read(self, state: Any) -> None:
        try:
            self._read_acquisitions()
        except _Closed:  # between acquisitions: a run waiting for frames fails; the next wait reconnects
            self._post(Failed(AcquisitionError(f"{self.what}: the sender closed the connection"), fatal=False))
        except OSError as e:
            if not self._stop.is_set():
                raise AcquisitionError(f"ASI Timepix3 data port {self.address}: {e}") from e

    def _read_acquisitions(self) -> None:
        while not self._stop.is_set():
            message = self._header(False)
            if not isinstance(message, AcquisitionStart):
                raise AcquisitionError(f"{self.what}: expected an AcquisitionStart header, got {message}")
            self._start = message
            while True:
                message = self._header(False)
                if isinstance(message, AcquisitionEnd):
                    break
                if not isinstance(message, ScanStart):
                    raise AcquisitionError(f"{self.what}: expected a ScanStart or AcquisitionEnd header, "
                                           f"got {message}")
                if message.metadata_length:
                    self._skip(message.metadata_length)
                if not self._read_scan(message):
                    break

    def _skip(self, nbytes: int) -> None:
        left = nbytes
        buf = bytearray(min(nbytes, 1 << 16))
        while left:
            part = memoryview(buf)[:min(left, len(buf))]
            if self._recv(part, True) < len(part):
                raise AcquisitionError(f"{self.what}: the sender closed the connection inside scan metadata")
            left -= len(part)

    def _read_scan(self, scan: ScanStart) -> bool:
        """One scan's chunks into the slab; False if an AcquisitionEnd ended it (the acquisition's end)."""
        start = self._start
        assert start is not None
        self._scan_frames = 0
        self._post(Header(start))
        while True:
            try:
                message = self._header(True)
            except _Closed:
                self._flush()
                raise AcquisitionError(f"{self.what}: the sender closed the connection after {self._scan_frames} "
                                       f"of {start.nimages} frames") from None
            if isinstance(message, (ScanEnd, AcquisitionEnd)):
                self._flush()
                self._post(End(scan.sequence))
                return isinstance(message, ScanEnd)
            if not isinstance(message, ArrayChunk):
                raise AcquisitionError(f"{self.what}: expected an ArrayChunk, ScanEnd or AcquisitionEnd header "
                                       f"in a scan, got {message}")
            self._read_chunk(message, start)

    def _read_chunk(self, chunk: ArrayChunk, start: AcquisitionStart) -> None:
        nbytes = chunk.payload_bytes(start, self.what)
        if chunk.nframes == 0:  # no frames: nothing to keep
            self._skip(nbytes)
            return
        if nbytes > self._slot_bytes:  # a slot holds at least the largest chunk: larger slots, fewer
            self._flush()
            self._slot_bytes = 1 << (nbytes - 1).bit_length()
            self._slots = self._slots_for(self._slot_bytes)
        slab = self._ensure_slab(self._slot_bytes)
        if self._open_slot is not None and (self._open_bytes + nbytes > slab.slot_bytes
                                            or len(self._chunks) == slab.frames or self._open_start is not start):
            self._flush()
        if self._open_slot is None:
            self._open_slot = self._take_free_slot()
        if not self._chunks:  # the open slot's first chunk
            self._open_count = self._open_bytes = 0
            self._open_start = start
        offset = self._open_bytes
        target = memoryview(slab.memory[self._open_slot])[offset:offset + nbytes]
        if self._recv(target, True) < nbytes:
            self._flush()
            raise AcquisitionError(f"{self.what}: the sender closed the connection inside a chunk (after "
                                   f"{self._scan_frames} of {start.nimages} frames)")
        self._chunks.append(ChunkPlace(offset, self._open_count, chunk))
        self._open_bytes += nbytes
        self._open_count += chunk.nframes
        self._scan_frames += chunk.nframes
        self.frames_received += chunk.nframes
        if len(self._chunks) == slab.frames:
            self._flush()

    def _flush(self) -> None:
        if self._open_slot is not None and self._chunks:
            assert self._open_start is not None
            self._open_layout = SlotLayout(self._open_start, tuple(self._chunks))
        self._chunks = []
        super()._flush()
