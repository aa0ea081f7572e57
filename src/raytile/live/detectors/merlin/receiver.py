"""`MerlinReceiver`: the Merlin data port read into a bounded slab of frame stacks.

A reader thread takes MPX messages off the socket. Frames (MIB header +
pixels, undecoded) are written straight into preallocated slots of
``frame_stack_size`` frames each, no intermediate copy. Every frame of an
acquisition has the size of its first, so after that one the reader takes
frames in blocks: one ``recvmsg_into`` scatters the 15-byte MPX prefixes
into a side array and the frames to their aligned places in the slot. It
waits in the kernel, without the GIL, until the rest of the slot came
(``MSG_WAITALL``) or the latency deadline passed (``SO_RCVTIMEO``), so a
slot of 64 frames costs one or two reads, not one per packet burst; the prefixes
are checked against the expected one with one numpy comparison, and the
complete frames committed together (no Python per frame). A message that
is not such a frame (a new acquisition header: the abort) ends the block;
the bytes read past its start are put back for the message-by-message
path. The slab, the hand-over of slots, backpressure and the consumer's
loop are :class:`~raytile.live.receiver.StackReceiver`'s. The consumer decodes each
stack with the ``mib`` format's decoders (:mod:`raytile.io.decoders_mib`)
straight into the arrays it yields. When every slot is taken the reader
stops reading the socket: TCP then holds the sender back (backpressure),
and memory stays at ``slots * frame_stack_size`` frames, whatever the
sender's rate. TCP does not lose frames, so nothing is dropped.

The consumer sees events in arrival order: an acquisition header, frame
stacks, the acquisition's end, or an :class:`~raytile.common.errors.AcquisitionError`
when the sender closes the connection mid-scan, stays silent past
``timeout`` seconds, or starts a new acquisition where a frame was expected
(the Merlin software's abort).

>>> rx = MerlinReceiver("127.0.0.1", 6342); rx.start()            # doctest: +SKIP
>>> header = rx.wait_for_header(10.0)                            # doctest: +SKIP
>>> for batch in rx.frames(header.nimages): ...                  # (k, h, w) arrays, in order
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import numpy as np

from raytile.common.errors import AcquisitionError
from raytile.io.decoders_mib import MIBFrameHeader, MIBRawFrameDecoder, frames_view, parse_frame_header
from raytile.live.detectors.merlin.mpx import PREFIX_BYTES, AcquisitionHeader, mpx_prefix, parse_prefix
from raytile.live.receiver import End, Event, Failed, Header, Slab, SocketStackReceiver, Stack

#: How every MPX message starts.
MPX_MARK = b"MPX,"

__all__ = ["MerlinReceiver"]

#: Buffers per ``recvmsg_into`` beyond the first (well under Linux's IOV_MAX of 1024): 64 frames' worth.
_IOV_PIECES = 128


def _received(pieces: list[memoryview], nbytes: int) -> bytes:
    """The first ``nbytes`` bytes that were read into ``pieces``, in order."""
    out, left = [], nbytes
    for piece in pieces:
        if left <= 0:
            break
        out.append(bytes(piece[:left]))
        left -= len(piece)
    return b"".join(out)


class MerlinReceiver(SocketStackReceiver):
    """Receive Merlin frames from ``host:port`` (see the module docstring).

    ``frame_stack_size``: frames per slot; ``slots``: slots in the slab (its
    memory bound); ``timeout``: seconds of silence mid-acquisition after
    which it fails; ``flush_s``: the latency deadline for a partial stack;
    ``drain`` (LiberTEM-live's): bytes that are no MPX message between acquisitions (what old Merlin
    software sends on connect) are skipped up to the next ``MPX,`` prefix, and counted in
    :attr:`drained_bytes`; without it they fail the run.
    """

    def __init__(self, host: str, port: int, frame_stack_size: int = 64, slots: int = 16,
                 timeout: float = 10.0, flush_s: float = 0.05, connect_timeout: float = 10.0,
                 drain: bool = False):
        super().__init__(frame_stack_size, slots, timeout, flush_s)
        self._drain = bool(drain)
        self.drained_bytes = 0
        self.address = f"{host}:{port}"
        self.what = f"Merlin {self.address}"
        self._host, self._port, self._connect_timeout = host, port, connect_timeout
        self._sock = None
        self._raw_decoders: dict[MIBFrameHeader, MIBRawFrameDecoder] = {}
        self._pushback = bytearray()
        self._iov_key: tuple[int, int] | None = None
        self._iov_prefixes = np.zeros((0, 0, PREFIX_BYTES), np.uint8)
        self._iov_cache: dict[int, list[memoryview]] = {}

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        except OSError as e:
            raise AcquisitionError(f"Merlin data port {self.address}: cannot connect ({e})") from e
        # Blocking reads with a kernel receive timeout, not Python's socket timeout: Python polls before
        # each read of a socket with a timeout, which takes and gives back the GIL twice per read, and a
        # read with MSG_WAITALL then takes whatever is there. Here a block read waits in the kernel for
        # all it asks (up to a slot of frames) or the latency deadline, without the GIL.
        sock.settimeout(None)
        wait = min(self._flush_s, 0.2)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                        struct.pack("ll", int(wait), max(1, int(round((wait % 1) * 1e6)))))
        self._sock = sock
        return sock

    # -- consumer side ---------------------------------------------------------------------
    def wait_for_header(self, timeout: float | None, accept: Any = None) -> AcquisitionHeader | None:
        """The next acquisition's header, or None after ``timeout`` seconds. Frames of an
        acquisition nobody read are dropped here (their slots go back), as a new arm means."""
        header: AcquisitionHeader | None = super().wait_for_header(timeout, accept)
        return header

    def _short_message(self, event: Event, got: int, count: int | None) -> str:
        if isinstance(event, Header):
            return (f"Merlin {self.address}: a new acquisition started after {got} of {count} frames "
                    f"(the scan was aborted)")
        return f"Merlin {self.address}: the acquisition ended after {got} of {count} frames"

    def _layout_geometry(self, layout: MIBFrameHeader) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(layout.sig_shape), np.dtype(layout.dtype)

    def _decode_into(self, stack: Stack, start: int, stop: int, out: np.ndarray) -> None:
        assert self._slab is not None
        header: MIBFrameHeader = stack.layout
        src = frames_view(self._slab.memory[stack.slot], header, count=stack.count)[start:stop]
        if header.raw:
            decoder = self._raw_decoders.get(header)
            if decoder is None:
                decoder = self._raw_decoders[header] = MIBRawFrameDecoder(header)
            decoder.decode(src, out, (0, 0))
        else:
            assert header.stored_dtype is not None
            h, w = header.sig_shape
            np.copyto(out, src.view(header.stored_dtype).reshape(len(src), h, w), casting="unsafe")

    # -- reader thread -----------------------------------------------------------------------
    def _recv(self, view: memoryview, in_acquisition: bool, at_boundary: bool = False) -> int:
        """Fill ``view`` (bytes put back by a block read first); returns fewer bytes only if the peer
        closed. Socket timeouts are retried until ``timeout`` s of silence mid-acquisition; at a frame
        boundary they flush the open stack."""
        assert self._sock is not None
        got, n, quiet_since = 0, len(view), time.monotonic()
        if self._pushback:
            got = min(n, len(self._pushback))
            view[:got] = self._pushback[:got]
            del self._pushback[:got]
        while got < n:
            if self._stop.is_set():
                raise OSError("receiver closed")
            try:
                k = self._sock.recv_into(view[got:], n - got)
            except BlockingIOError:  # the kernel's receive timeout (EAGAIN): see _connect
                if at_boundary and got == 0 and self._open_count:
                    self._flush()  # the latency deadline: hand on a partial stack
                self._check_silence(in_acquisition, quiet_since)
                continue
            if k == 0:
                return got
            got += k
            quiet_since = time.monotonic()
        return got

    def _check_silence(self, in_acquisition: bool, quiet_since: float) -> None:
        if in_acquisition and time.monotonic() - quiet_since > self._timeout:
            raise AcquisitionError(f"Merlin {self.address}: no data for {self._timeout:g} s in an "
                                   f"acquisition ({self._frames_in_aq} of {self._nimages or 'unbounded'} "
                                   f"frames)") from None

    def _read(self, state: Any) -> None:
        try:
            self._read_acquisitions()
        except OSError as e:
            if not self._stop.is_set():
                self._post(Failed(AcquisitionError(f"Merlin data port {self.address}: {e}")))

    def _read_acquisitions(self) -> None:
        self._nimages, self._frames_in_aq = 0, 0
        self._frame_header: MIBFrameHeader | None = None
        self._pushback = bytearray()  # stream bytes a block read took past an interrupting message's start
        prefix = bytearray(PREFIX_BYTES)
        pending: bytes | None = None  # a header message read where a frame was expected
        while not self._stop.is_set():
            if pending is None:
                if self._recv(memoryview(prefix), False) < PREFIX_BYTES:
                    return  # closed between acquisitions
                if self._drain and not prefix.startswith(MPX_MARK) and not self._skip_to_message(prefix):
                    return  # closed while draining
                body = bytearray(parse_prefix(bytes(prefix), f"Merlin {self.address}"))
                if self._recv(memoryview(body), True) < len(body):
                    raise AcquisitionError(f"Merlin {self.address}: connection closed inside a message")
                pending = bytes(body)
            header = AcquisitionHeader.parse(pending, f"Merlin {self.address}")
            pending = None
            self._post(Header(header))
            self._nimages, self._frames_in_aq, self._frame_header = header.nimages, 0, None
            pending = self._read_frames(prefix)

    def _skip_to_message(self, prefix: bytearray) -> bool:
        """Drain: read on from ``prefix`` until an ``MPX,`` prefix starts, put it back to be read, and
        count what was skipped; False if the peer closed first."""
        window = bytes(prefix)
        piece = bytearray(PREFIX_BYTES)
        while True:
            at = window.find(MPX_MARK)
            if at >= 0:
                self.drained_bytes += at
                self._pushback[:0] = window[at:]
                return self._recv(memoryview(prefix), False) == PREFIX_BYTES
            keep = len(MPX_MARK) - 1  # a marker split across two reads
            self.drained_bytes += len(window) - keep
            window = window[-keep:]
            n = self._recv(memoryview(piece), False)
            if n < PREFIX_BYTES:
                return False
            window += bytes(piece)

    def _read_frames(self, prefix: bytearray) -> bytes | None:
        """Frames of one acquisition into the slab; returns a new acquisition's header message when one
        interrupts it (after posting the abort), or None at its end. The first frame is read message by
        message (its header gives the frame size); the rest in blocks (:meth:`_read_block`)."""
        while self._nimages == 0 or self._frames_in_aq < self._nimages:
            if self._frame_header is not None and not self._pushback:
                interrupting = self._read_block(self._frame_header)
                if interrupting is None:
                    continue
                length = interrupting
            else:
                got = self._recv(memoryview(prefix), True, at_boundary=True)
                if got < PREFIX_BYTES:
                    self._flush()
                    raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection after "
                                           f"{self._frames_in_aq} of {self._nimages or 'unbounded'} frames")
                length = parse_prefix(bytes(prefix), f"Merlin {self.address}")
            if self._frame_header is not None and length != self._frame_header.frame_stride:
                return self._interrupted(length)
            self._ensure_slab(self._stack * length)
            target = self._open_frame(self._frame_header, length)
            if self._recv(target, True) < length:
                self._flush()
                raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection inside frame "
                                       f"{self._frames_in_aq + 1} of {self._nimages or 'unbounded'}")
            if self._frame_header is None:
                self._frame_header = self._first_frame(target)
                self._open_layout = self._frame_header  # the slot was opened before the header was known
            self._frames_in_aq += 1
            self._frame_done()
        self._flush()
        self._post(End())
        return None

    def _read_block(self, header: MIBFrameHeader) -> int | None:
        """Read the next frame messages, up to the open slot's end or the acquisition's, with one
        ``recvmsg_into`` per socket read: the 15-byte MPX prefixes go to a side array, the frames to
        their places in the slot (so the pixels stay aligned for the vectorised decode). Prefixes are
        checked all at once against the one every frame of the acquisition has; the frames whose
        messages are complete are committed to the slot after each read. Returns None when the block
        ended (or the latency deadline flushed the stack), or the payload length of a message that is
        not a frame (its prefix bytes and what followed are put back for :meth:`_recv`)."""
        slab = self._slab
        assert slab is not None and self._sock is not None
        length = header.frame_stride
        msg = PREFIX_BYTES + length
        if self._open_slot is not None and self._open_layout != header:
            self._flush()
        if self._open_slot is None:
            self._open_slot = self._take_free_slot()
            self._open_layout, self._open_count, self._open_bytes = header, 0, 0
        slot, first = self._open_slot, self._open_count
        k = slab.frames - first
        if self._nimages:
            k = min(k, self._nimages - self._frames_in_aq)
        pieces, prefixes = self._iov(slab, slot, length)
        expected = self._expected_prefix(length)
        pieces = pieces[2 * first:2 * (first + k)]
        total, got, checked, committed = k * msg, 0, 0, 0
        quiet_since = time.monotonic()
        while got < total:
            if self._stop.is_set():
                raise OSError("receiver closed")
            index, within = divmod(got, msg)
            part = 2 * index + (within >= PREFIX_BYTES)
            skip = within if within < PREFIX_BYTES else within - PREFIX_BYTES
            bufs = [pieces[part][skip:], *pieces[part + 1:part + 1 + _IOV_PIECES]]
            asked = sum(map(len, bufs))
            try:
                n = self._sock.recvmsg_into(bufs, 0, socket.MSG_WAITALL)[0]
            except BlockingIOError:  # the kernel's receive timeout (EAGAIN): see _connect
                if got == committed * msg and self._open_count:
                    self._flush()  # the latency deadline: hand on a partial stack
                    return None
                self._check_silence(True, quiet_since)
                continue
            if n == 0:
                self._commit(slot, first, committed, got // msg, length)
                self._flush()
                if got % msg == 0:
                    raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection after "
                                           f"{self._frames_in_aq} of {self._nimages or 'unbounded'} frames")
                raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection inside frame "
                                       f"{self._frames_in_aq + 1} of {self._nimages or 'unbounded'}")
            got += n
            quiet_since = time.monotonic()
            whole_prefixes = min(k, (got + msg - PREFIX_BYTES) // msg)
            if whole_prefixes > checked:
                ok = (prefixes[first + checked:first + whole_prefixes] == expected).all(axis=1)
                if not ok.all():
                    bad = checked + int(np.argmin(ok))
                    self._commit(slot, first, committed, bad, length)
                    rest = _received(pieces[2 * bad:], got - bad * msg)
                    self._pushback = bytearray(rest[PREFIX_BYTES:])
                    return parse_prefix(rest[:PREFIX_BYTES], f"Merlin {self.address}")
                checked = whole_prefixes
            whole = got // msg
            if whole > committed:
                self._commit(slot, first, committed, whole, length)
                committed = whole
            if n < asked and got == committed * msg and self._open_count:
                self._flush()  # the read waited out the latency deadline: hand on what came
                return None
        return None

    def _commit(self, slot: int, first: int, start: int, stop: int, length: int) -> None:
        """Frames ``first + start : first + stop`` of the open slot are in: count them, hand a full slot on."""
        if stop <= start:
            return
        slab = self._slab
        assert slab is not None
        i, j = first + start, first + stop
        slab.offsets[slot, i:j] = np.arange(i, j) * length
        slab.sizes[slot, i:j] = length
        slab.missing[slot, i:j] = False
        self._open_count, self._open_bytes = j, j * length
        self._frames_in_aq += stop - start
        self.frames_received += stop - start
        if j == slab.frames:
            self._flush()

    def _iov(self, slab: Slab, slot: int, length: int) -> tuple[list[memoryview], np.ndarray]:
        """The read buffers of ``slot`` (prefix 0, frame 0, prefix 1, ...) and the prefixes' array, made
        once per slab and frame size."""
        if self._iov_key != (id(slab), length):
            self._iov_key = (id(slab), length)
            self._iov_prefixes = np.zeros((slab.slots, slab.frames, PREFIX_BYTES), np.uint8)
            self._iov_cache = {}
        pieces = self._iov_cache.get(slot)
        if pieces is None:
            frames = memoryview(slab.memory[slot])
            prefixes = memoryview(self._iov_prefixes[slot].reshape(-1))
            pieces = []
            for i in range(slab.frames):
                pieces += [prefixes[i * PREFIX_BYTES:(i + 1) * PREFIX_BYTES], frames[i * length:(i + 1) * length]]
            self._iov_cache[slot] = pieces
        return pieces, self._iov_prefixes[slot]

    def _expected_prefix(self, length: int) -> np.ndarray:
        return np.frombuffer(mpx_prefix(length), np.uint8)

    def _interrupted(self, length: int) -> bytes:
        body = bytearray(length)
        if self._recv(memoryview(body), True) < length:
            raise AcquisitionError(f"Merlin {self.address}: connection closed inside a message")
        if not bytes(body[:3]) == b"HDR":
            raise AcquisitionError(f"Merlin {self.address}: a message of {length} bytes where a frame of "
                                   f"{self._frame_header.frame_stride if self._frame_header else '?'} bytes was "
                                   f"expected (frame {self._frames_in_aq + 1})")
        self._flush()
        self._post(Failed(AcquisitionError(
            f"Merlin {self.address}: the acquisition was aborted after {self._frames_in_aq} of "
            f"{self._nimages or 'unbounded'} frames (a new acquisition header arrived)"), fatal=False))
        return bytes(body)

    def _first_frame(self, target: memoryview) -> MIBFrameHeader:
        header = parse_frame_header(bytes(target[:min(len(target), 4096)]), f"Merlin {self.address}")
        if header.frame_stride != len(target):
            raise AcquisitionError(f"Merlin {self.address}: frame message of {len(target)} bytes, its header "
                                   f"says {header.frame_stride}")
        return header

