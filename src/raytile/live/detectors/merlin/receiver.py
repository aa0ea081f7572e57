"""`MerlinReceiver`: the Merlin data port read into a bounded slab of frame stacks.

A reader thread takes MPX messages off the socket. Frames (MIB header +
pixels, undecoded) are written straight into preallocated slots of
``frame_stack_size`` frames each (``recv_into``, no intermediate copy). A
full slot, the acquisition's last frame, or ``flush_s`` without a new frame
hands the slot to the consumer; the consumer decodes the stack with
:func:`~raytile.io.decoders_mib.decode_frames` into a fresh array and gives
the slot back. When every slot is taken the reader stops reading the
socket: TCP then holds the sender back (backpressure), and memory stays at
``slots * frame_stack_size`` frames, whatever the sender's rate. Nothing is
dropped.

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

import collections
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Generator, Iterator, Union

import numpy as np

from raytile.common.errors import AcquisitionError, DataSetException
from raytile.io.decoders_mib import MIBFrameHeader, decode_frames, parse_frame_header
from raytile.live.detectors.merlin.mpx import PREFIX_BYTES, AcquisitionHeader, parse_prefix

__all__ = ["MerlinReceiver", "Header", "Stack", "End", "Failed"]


@dataclass(frozen=True)
class Header:
    """An acquisition started."""

    header: AcquisitionHeader


@dataclass(frozen=True)
class Stack:
    """``count`` frames of ``frame_header``'s layout in slot ``slot``."""

    slot: int
    count: int
    frame_header: MIBFrameHeader


@dataclass(frozen=True)
class End:
    """The acquisition's last frame arrived."""


@dataclass(frozen=True)
class Failed:
    """The acquisition was aborted (``fatal`` False: the connection goes on) or the connection
    failed (``fatal``); ``error`` says how."""

    error: DataSetException
    fatal: bool = True


Event = Union[Header, Stack, End, Failed]


class _Slab:
    """``slots`` preallocated stacks of ``frames`` frames of ``stride`` bytes; a free list of them."""

    def __init__(self, slots: int, frames: int, stride: int):
        self.frames, self.stride = frames, stride
        self.memory = np.empty((slots, frames * stride), dtype=np.uint8)
        self.free: queue.Queue[int] = queue.Queue()
        for i in range(slots):
            self.free.put(i)


class MerlinReceiver:
    """Receive Merlin frames from ``host:port`` (see the module docstring).

    ``frame_stack_size``: frames per slot; ``slots``: slots in the slab (its
    memory bound); ``timeout``: seconds of silence mid-acquisition after
    which it fails; ``flush_s``: the latency deadline for a partial stack.
    """

    def __init__(self, host: str, port: int, frame_stack_size: int = 64, slots: int = 16,
                 timeout: float = 10.0, flush_s: float = 0.05, connect_timeout: float = 10.0):
        self.address = f"{host}:{port}"
        self._host, self._port = host, port
        self._stack, self._slots = frame_stack_size, slots
        self._timeout, self._flush_s, self._connect_timeout = timeout, flush_s, connect_timeout
        self._events: queue.Queue[Event] = queue.Queue()
        self._slab: _Slab | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._carry: np.ndarray | None = None  # decoded frames past the end of the last frames() call
        self.frames_received = 0
        #: ``(frames received so far, time.monotonic())`` when each stack was handed on (the newest 100,000
        #: stacks): when frames arrived, for latency figures (benchmarks/bench_live.py).
        self.arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=100_000)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        except OSError as e:
            raise AcquisitionError(f"Merlin data port {self.address}: cannot connect ({e})") from e
        self._sock.settimeout(min(self._flush_s, 0.2))
        self._thread = threading.Thread(target=self._read_loop, name=f"merlin-rx-{self.address}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._sock is not None:
            self._sock.close()
        self._sock = self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def slab_bytes(self) -> int:
        """Bytes the slab holds (0 before the first frame): the receive side's memory bound."""
        return 0 if self._slab is None else self._slab.memory.nbytes

    # -- consumer side -----------------------------------------------------------------
    def wait_for_header(self, timeout: float | None) -> AcquisitionHeader | None:
        """The next acquisition's header, or None after ``timeout`` seconds. Frames of an
        acquisition nobody read are dropped here (their slots go back), as a new arm means."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._carry = None
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(event, Header):
                return event.header
            if isinstance(event, Stack):
                self._release(event.slot)
            elif isinstance(event, Failed) and event.fatal:
                raise event.error

    def frames(self, count: int | None, dtype: Any = None) -> Iterator[np.ndarray]:
        """Decoded frame stacks ``(k, h, w)`` of ``dtype`` (default: the counter depth's) until ``count``
        frames (None: until the acquisition ends); frames past ``count`` stay for the next call (the
        next scan of a continuous acquisition). Raises AcquisitionError when the acquisition fails
        or ends short."""
        got = 0
        if self._carry is not None:
            batch, self._carry = self._carry, None
            got += yield from self._take(batch, count, got)
        while count is None or got < count:
            event = self._next_event(got, count)
            if isinstance(event, End):
                if count is None:
                    return
                raise AcquisitionError(f"Merlin {self.address}: the acquisition ended after {got} of {count} frames")
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Header):
                raise AcquisitionError(f"Merlin {self.address}: a new acquisition started after {got} of "
                                       f"{count} frames (the scan was aborted)")
            assert self._slab is not None
            try:
                batch = decode_frames(self._slab.memory[event.slot], event.frame_header, dtype, count=event.count)
            finally:
                self._release(event.slot)
            got += yield from self._take(batch, count, got)

    def _take(self, batch: np.ndarray, count: int | None, got: int) -> Generator[np.ndarray, None, int]:
        """Yield what of ``batch`` fits below ``count``; keep the rest as the carry. Returns frames yielded."""
        if count is not None and got + len(batch) > count:
            self._carry = batch[count - got:]
            batch = batch[:count - got]
        if len(batch):
            yield batch
        return len(batch)

    def _next_event(self, got: int, count: int | None) -> Event:
        try:
            return self._events.get(timeout=self._timeout + 1.0)
        except queue.Empty:
            raise AcquisitionError(f"Merlin {self.address}: no frame for {self._timeout + 1.0:.0f} s after "
                                   f"{got} of {count if count is not None else 'the'} frames") from None

    def _release(self, slot: int) -> None:
        assert self._slab is not None
        self._slab.free.put(slot)

    # -- reader thread -------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            self._read_acquisitions()
        except DataSetException as e:
            self._events.put(Failed(e))
        except OSError as e:
            if not self._stop.is_set():
                self._events.put(Failed(AcquisitionError(f"Merlin data port {self.address}: {e}")))

    def _recv(self, view: memoryview, in_acquisition: bool, at_boundary: bool = False) -> int:
        """Fill ``view``; returns fewer bytes only if the peer closed. Socket timeouts are retried until
        ``timeout`` s of silence mid-acquisition; at a frame boundary they flush the open stack."""
        assert self._sock is not None
        got, n, quiet_since = 0, len(view), time.monotonic()
        while got < n:
            if self._stop.is_set():
                raise OSError("receiver closed")
            try:
                k = self._sock.recv_into(view[got:], n - got)
            except TimeoutError:
                if at_boundary and got == 0 and self._open_count:
                    self._flush()  # the latency deadline: hand on a partial stack
                if in_acquisition and time.monotonic() - quiet_since > self._timeout:
                    raise AcquisitionError(f"Merlin {self.address}: no data for {self._timeout:g} s in an "
                                           f"acquisition ({self._frames_in_aq} of {self._nimages or 'unbounded'} "
                                           f"frames)") from None
                continue
            if k == 0:
                return got
            got += k
            quiet_since = time.monotonic()
        return got

    def _read_acquisitions(self) -> None:
        self._nimages, self._frames_in_aq, self._open_count = 0, 0, 0
        self._open_slot: int | None = None
        self._frame_header: MIBFrameHeader | None = None
        prefix = bytearray(PREFIX_BYTES)
        pending: bytes | None = None  # a header message read where a frame was expected
        while not self._stop.is_set():
            if pending is None:
                if self._recv(memoryview(prefix), False) < PREFIX_BYTES:
                    return  # closed between acquisitions
                body = bytearray(parse_prefix(bytes(prefix), f"Merlin {self.address}"))
                if self._recv(memoryview(body), True) < len(body):
                    raise AcquisitionError(f"Merlin {self.address}: connection closed inside a message")
                pending = bytes(body)
            header = AcquisitionHeader.parse(pending, f"Merlin {self.address}")
            pending = None
            self._events.put(Header(header))
            self._nimages, self._frames_in_aq, self._frame_header = header.nimages, 0, None
            pending = self._read_frames(prefix)

    def _read_frames(self, prefix: bytearray) -> bytes | None:
        """Frames of one acquisition into the slab; returns a new acquisition's header message when one
        interrupts it (after posting the abort), or None at its end."""
        while self._nimages == 0 or self._frames_in_aq < self._nimages:
            got = self._recv(memoryview(prefix), True, at_boundary=True)
            if got < PREFIX_BYTES:
                self._flush()
                raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection after "
                                       f"{self._frames_in_aq} of {self._nimages or 'unbounded'} frames")
            length = parse_prefix(bytes(prefix), f"Merlin {self.address}")
            if self._frame_header is not None and length != self._frame_header.frame_stride:
                return self._interrupted(length)
            target = self._slot_view(length)
            if self._recv(target, True) < length:
                self._flush()
                raise AcquisitionError(f"Merlin {self.address}: the sender closed the connection inside frame "
                                       f"{self._frames_in_aq + 1} of {self._nimages or 'unbounded'}")
            if self._frame_header is None:
                self._frame_header = self._first_frame(target)
            self._open_count += 1
            self._frames_in_aq += 1
            self.frames_received += 1
            assert self._slab is not None
            if self._open_count == self._slab.frames:
                self._flush()
        self._flush()
        self._events.put(End())
        return None

    def _interrupted(self, length: int) -> bytes:
        body = bytearray(length)
        if self._recv(memoryview(body), True) < length:
            raise AcquisitionError(f"Merlin {self.address}: connection closed inside a message")
        if not bytes(body[:3]) == b"HDR":
            raise AcquisitionError(f"Merlin {self.address}: a message of {length} bytes where a frame of "
                                   f"{self._frame_header.frame_stride if self._frame_header else '?'} bytes was "
                                   f"expected (frame {self._frames_in_aq + 1})")
        self._flush()
        self._events.put(Failed(AcquisitionError(
            f"Merlin {self.address}: the acquisition was aborted after {self._frames_in_aq} of "
            f"{self._nimages or 'unbounded'} frames (a new acquisition header arrived)"), fatal=False))
        return bytes(body)

    def _first_frame(self, target: memoryview) -> MIBFrameHeader:
        header = parse_frame_header(bytes(target[:min(len(target), 4096)]), f"Merlin {self.address}")
        if header.frame_stride != len(target):
            raise AcquisitionError(f"Merlin {self.address}: frame message of {len(target)} bytes, its header "
                                   f"says {header.frame_stride}")
        return header

    def _slot_view(self, stride: int) -> memoryview:
        """Where the next frame goes: the open slot, or a free one (blocking: backpressure)."""
        if self._slab is None or self._slab.stride != stride:
            self._slab = self._new_slab(stride)
        if self._open_slot is None:
            self._open_slot = self._take_free_slot()
        start = self._open_count * stride
        return memoryview(self._slab.memory[self._open_slot])[start:start + stride]

    def _new_slab(self, stride: int) -> _Slab:
        if self._slab is not None:  # a new frame size: wait until the consumer gave back every slot
            while self._slab.free.qsize() < self._slots and not self._stop.is_set():
                time.sleep(0.01)
        return _Slab(self._slots, self._stack, stride)

    def _take_free_slot(self) -> int:
        assert self._slab is not None
        while not self._stop.is_set():
            try:
                return self._slab.free.get(timeout=0.1)
            except queue.Empty:
                continue
        raise OSError("receiver closed")

    def _flush(self) -> None:
        if self._open_slot is not None and self._open_count:
            assert self._frame_header is not None
            self._events.put(Stack(self._open_slot, self._open_count, self._frame_header))
            self.arrivals.append((self.frames_received, time.monotonic()))
            self._open_slot, self._open_count = None, 0
