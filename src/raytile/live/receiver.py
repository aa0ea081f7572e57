"""`StackReceiver`: what the detector receivers share: a bounded slab, a reader thread, the consumer's loop.

A detector receiver (:mod:`raytile.live.detectors.merlin.receiver`,
:mod:`raytile.live.detectors.dectris.receiver`) subclasses it and writes
only its protocol: how to connect, how to read messages into the slab's
slots (``_read``), and how to decode frames of a slot (``_decode_into``).
This module holds the rest, the LiberTEM-rs receive contract:

* a :class:`Slab` of ``slots`` preallocated slots; a slot holds up to
  ``frames`` frames in ``slot_bytes`` bytes, each at an offset with a size
  (fixed-size raw frames or variable-size compressed ones);
* the reader thread writes frames into the open slot and hands it on
  (:meth:`StackReceiver._flush`) when it is full, at an acquisition's end,
  or after ``flush_s`` without a frame (the latency deadline); with every
  slot taken it waits for a free one and does not read its socket
  meanwhile: backpressure on TCP, ZeroMQ and the detector, never a drop;
* the consumer (:meth:`StackReceiver.frames`) sees events in arrival
  order, decodes each stack straight into the arrays it yields, and gives
  the slot back. With ``batch`` it yields arrays cut on a stream data set's
  partition boundaries, so the stream hands them to the run without a copy;
* frames the sender lost (a gap in its frame numbers) are counted in
  :attr:`StackReceiver.frames_dropped` and, by the receiver's policy, come
  as zero frames (:attr:`Slab.missing`) or end the run.

>>> rx = SomeReceiver(...); rx.start()                          # doctest: +SKIP
>>> header = rx.wait_for_header(10.0)                          # doctest: +SKIP
>>> for batch in rx.frames(count, batch=(128, 4096)): ...      # (k, h, w) arrays, in order
"""

from __future__ import annotations

import collections
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Union

import numpy as np

from raytile.common.errors import AcquisitionCancelled, AcquisitionError, DataSetException

__all__ = ["AcquisitionStats", "AcquisitionFrames", "Slab", "StackReceiver", "Header", "Stack", "End", "Failed", "Event", "DROP_POLICIES", "partition_batches", "ReusedArrays", "SocketStackReceiver",
           "live_frames_per_partition", "LIVE_MIN_PARTITIONS_PER_SCAN"]

#: What a receiver does with frames the sender lost: ``"zero"`` puts zero frames in their place (the run
#: goes on; :attr:`StackReceiver.frames_dropped` counts them), ``"fail"`` ends the run.
DROP_POLICIES = ("zero", "fail")


@dataclass(frozen=True)
class Header:
    """An acquisition (Merlin) or series (DECTRIS) started; ``info`` is the detector's header."""

    info: Any


@dataclass(frozen=True)
class Stack:
    """``count`` frames of ``layout`` (the detector's frame description) in slot ``slot``."""

    slot: int
    count: int
    layout: Any


@dataclass(frozen=True)
class End:
    """The acquisition's last frame arrived; ``info`` names it (a series id, or None)."""

    info: Any = None


@dataclass(frozen=True)
class Failed:
    """The acquisition was aborted (``fatal`` False: the connection goes on) or the connection
    failed (``fatal``); ``error`` says how."""

    error: DataSetException
    fatal: bool = True


Event = Union[Header, Stack, End, Failed]


@dataclass
class AcquisitionStats:
    """What one acquisition's frames were: ``frames`` delivered to the run, of which ``frames_dropped``
    were lost by the sender and delivered as zero frames. ``LiveContext.make_acquisition`` puts it on the
    acquisition as ``aq.stats``; it counts while the run goes on."""

    frames: int = 0
    frames_dropped: int = 0


class Slab:
    """``slots`` preallocated slots of ``slot_bytes`` bytes, each holding up to ``frames`` frames; a free
    list of them (LIFO: the same few slots stay warm in the caches).

    ``offsets[slot, i]``/``sizes[slot, i]`` locate frame ``i`` of a slot;
    ``missing[slot, i]`` marks a frame the sender lost (decoded as zeros).
    The memory is allocated here and touched only as slots are used.
    """

    def __init__(self, slots: int, frames: int, slot_bytes: int):
        self.frames, self.slot_bytes = frames, slot_bytes
        self.memory = np.empty((slots, slot_bytes), dtype=np.uint8)
        self.offsets = np.zeros((slots, frames), np.int64)
        self.sizes = np.zeros((slots, frames), np.int64)
        self.missing = np.zeros((slots, frames), np.bool_)
        self.free: queue.LifoQueue[int] = queue.LifoQueue()
        for i in reversed(range(slots)):
            self.free.put(i)

    @property
    def slots(self) -> int:
        return int(self.memory.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.memory.nbytes)


class StackReceiver:
    """The receive side shared by the detectors (see the module docstring).

    Subclasses set :attr:`what` (e.g. ``"Merlin 127.0.0.1:6342"``) and
    implement :meth:`_connect`, :meth:`_read` (the reader thread's loop,
    using :meth:`_open_frame` and :meth:`_flush`), :meth:`_decode_into` and
    :meth:`_layout_geometry`; optionally :meth:`_wake` and
    :meth:`_disconnect`. ``timeout``: seconds of silence mid-acquisition
    before the consumer gives up; ``flush_s``: the latency deadline.
    """

    what = "receiver"

    def __init__(self, frame_stack_size: int, slots: int, timeout: float, flush_s: float):
        self._stack, self._slots = frame_stack_size, slots
        self._timeout, self._flush_s = timeout, flush_s
        self._events: queue.Queue[Event] = queue.Queue()
        self._slab: Slab | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._carry: tuple[Stack, int] | None = None  # a stack partly consumed by the last frames() call
        self._open_slot: int | None = None
        self._open_count = self._open_bytes = 0
        self._open_layout: Any = None
        #: Frames received (and, for lost ones, put in their place) since the receiver started.
        self.frames_received = 0
        #: Frames the sender lost (gaps in its frame numbers); zero frames took their place.
        self.frames_dropped = 0
        #: ``(frames received so far, time.monotonic())`` when each stack was handed on (the newest
        #: 100,000): when frames arrived, for latency figures (benchmarks/bench_live.py).
        self.arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=100_000)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Connect and start the reader thread; AcquisitionError if the detector cannot be reached."""
        self._stop.clear()
        state = self._connect()
        self._thread = threading.Thread(target=self._run, args=(state,), name=f"raytile-rx-{self.what}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the reader thread and release the connection (bounded: the thread polls the stop flag)."""
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)  # (a finalizer may run close on the reader thread itself)
        self._disconnect()
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def slab_bytes(self) -> int:
        """Bytes the slab holds (0 before the first frame): the receive side's memory bound."""
        return 0 if self._slab is None else self._slab.nbytes

    # -- the protocol's part (subclasses) ---------------------------------------------------
    def _connect(self) -> Any:
        """Open the connection; returns what :meth:`_read` gets."""
        raise NotImplementedError

    def _read(self, state: Any) -> None:
        """The reader thread's loop (returns when the connection ends or the receiver stops)."""
        raise NotImplementedError

    def _decode_into(self, stack: Stack, start: int, stop: int, out: np.ndarray) -> None:
        """Decode frames ``start:stop`` of ``stack`` into ``out`` (``(stop - start, h, w)``, any dtype)."""
        raise NotImplementedError

    def _layout_geometry(self, layout: Any) -> tuple[tuple[int, ...], np.dtype]:
        """``(sig_shape, native dtype)`` of frames of ``layout``."""
        raise NotImplementedError

    def _wake(self) -> None:
        """Make a blocked read return (close() calls it after setting the stop flag)."""

    def _disconnect(self) -> None:
        """Release the connection after the thread ended."""

    def _skipped_header(self, info: Any) -> None:
        """A header :meth:`wait_for_header` did not accept (DECTRIS counts it as stale)."""

    def _short_message(self, event: Event, got: int, count: int | None) -> str:
        """The error of an acquisition that ends (End) or restarts (Header) after ``got`` of ``count``."""
        if isinstance(event, Header):
            return f"{self.what}: a new acquisition started after {got} of {count} frames"
        return f"{self.what}: the acquisition ended after {got} of {count} frames"

    # -- reader thread -----------------------------------------------------------------------
    def _run(self, state: Any) -> None:
        try:
            self._read(state)
        except DataSetException as e:
            self._events.put(Failed(e))
        except Exception as e:  # a bug or a socket failure: the consumer must hear of it
            if not self._stop.is_set():
                self._events.put(Failed(AcquisitionError(f"{self.what}: receiver failed: {type(e).__name__}: {e}")))

    def _ensure_slab(self, slot_bytes: int) -> Slab:
        """The slab, made for slots of ``slot_bytes`` (a new size waits until every slot came back)."""
        if self._slab is not None and self._slab.slot_bytes != slot_bytes:
            self._flush()
            while self._slab.free.qsize() < self._slab.slots and not self._stop.is_set():
                time.sleep(0.01)
            self._slab = None
        if self._slab is None:
            self._slab = Slab(self._slots, self._stack, slot_bytes)
        return self._slab

    def _take_free_slot(self) -> int:
        """A free slot; waits while the consumer holds them all (the socket is not read meanwhile)."""
        assert self._slab is not None
        while True:
            try:
                return self._slab.free.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    raise AcquisitionError(f"{self.what}: receiver closed") from None

    def _open_frame(self, layout: Any, nbytes: int, missing: bool = False) -> memoryview:
        """Where the next frame of ``layout`` and ``nbytes`` bytes goes: in the open slot, or (a slot
        full in bytes, or another layout) in a new one taken from the free list (blocking:
        backpressure). ``missing``: a lost frame, decoded as zeros. The caller fills the view, then
        calls :meth:`_frame_done`."""
        slab = self._slab
        assert slab is not None
        if nbytes > slab.slot_bytes:
            raise AcquisitionError(f"{self.what}: a frame of {nbytes} bytes does not fit a receive slot of "
                                   f"{slab.slot_bytes} bytes")
        if self._open_slot is not None and ((layout is not self._open_layout and layout != self._open_layout)
                                            or self._open_bytes + nbytes > slab.slot_bytes):
            self._flush()
        if self._open_slot is None:
            self._open_slot = self._take_free_slot()
            self._open_layout, self._open_count, self._open_bytes = layout, 0, 0
        slot, i = self._open_slot, self._open_count
        slab.offsets[slot, i] = self._open_bytes
        slab.sizes[slot, i] = nbytes
        slab.missing[slot, i] = missing
        return memoryview(slab.memory[slot])[self._open_bytes:self._open_bytes + nbytes]

    def _frame_done(self) -> None:
        """The frame :meth:`_open_frame` gave is filled; a full slot is handed on."""
        assert self._slab is not None and self._open_slot is not None
        self._open_bytes += int(self._slab.sizes[self._open_slot, self._open_count])
        self._open_count += 1
        self.frames_received += 1
        if self._open_count == self._slab.frames:
            self._flush()

    def _lost_frames(self, layout: Any, n: int) -> None:
        """``n`` frames the sender lost: zero frames in their place, counted."""
        for _ in range(n):
            self._open_frame(layout, 0, missing=True)
            self._frame_done()
        self.frames_dropped += n

    def _flush(self) -> None:
        """Hand the open slot on (if it holds frames)."""
        if self._open_slot is not None and self._open_count:
            self._events.put(Stack(self._open_slot, self._open_count, self._open_layout))
            self.arrivals.append((self.frames_received, time.monotonic()))
            self._open_slot, self._open_count, self._open_bytes = None, 0, 0

    def _post(self, event: Event) -> None:
        self._events.put(event)

    # -- consumer side ------------------------------------------------------------------------
    def wait_for_header(self, timeout: float | None, accept: Callable[[Any], bool] | None = None) -> Any:
        """The next acquisition's header info (one ``accept`` takes, if given), or None after ``timeout``
        seconds. Stacks of an acquisition nobody read are dropped here (their slots go back)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._drop_carry()
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(event, Header):
                if accept is None or accept(event.info):
                    return event.info
                self._skipped_header(event.info)
            elif isinstance(event, Stack):
                self._release(event.slot)
            elif isinstance(event, Failed) and event.fatal:
                raise event.error

    def frames(self, count: int | None, dtype: Any = None, batch: tuple[int, int] | None = None,
               stats: AcquisitionStats | None = None) -> Iterator[np.ndarray]:
        """Decoded frames ``(k, h, w)`` of ``dtype`` (default: the detector's) until ``count`` frames
        (None: until the acquisition ends). ``batch=(frames_per_partition, scan_frames)`` cuts the
        arrays on a stream's partition boundaries; without it, one array per received stack. Frames
        of a stack past ``count`` stay for the next call (the next scan of a continuous
        acquisition). ``stats`` counts the frames and the lost ones delivered. Raises AcquisitionError
        when the acquisition fails, ends short or restarts."""
        stats = stats if stats is not None else AcquisitionStats()
        arrays = ReusedArrays()
        got = 0
        out: np.ndarray | None = None
        filled = 0
        held: Stack | None = None
        try:
            while count is None or got < count:
                taken = self._next_stack(got, count)
                if taken is None:
                    break
                held, start = taken
                sig, native = self._layout_geometry(held.layout)
                want = held.count - start if count is None else min(held.count - start, count - got)
                stop = start + want
                while start < stop:
                    if out is None:
                        size = _batch_size(got, batch, stop - start)
                        if count is not None:
                            size = min(size, count - got)
                        out, filled = arrays.take((size,) + tuple(sig), np.dtype(dtype or native)), 0
                    take = min(stop - start, len(out) - filled)
                    self._decode_into(held, start, start + take, out[filled:filled + take])
                    assert self._slab is not None
                    stats.frames_dropped += int(self._slab.missing[held.slot, start:start + take].sum())
                    stats.frames += take
                    start, filled, got = start + take, filled + take, got + take
                    if filled == len(out):
                        done, out = out, None
                        yield done
                if stop < held.count:
                    self._carry, held = (held, stop), None
                else:
                    self._release(held.slot)
                    held = None
            if out is not None and filled:
                yield out[:filled]
        finally:
            arrays.clear()
            if held is not None:
                self._release(held.slot)

    def _next_stack(self, got: int, count: int | None) -> tuple[Stack, int] | None:
        """The stack to read next and the first of its frames not yet read: the one the last call left
        part-read, else the next event's; None when the acquisition ended and ``count`` is None.

        Raises what the receiver failed with, AcquisitionCancelled when it ended before ``count``
        frames (LiberTEM-live cancels the run), and AcquisitionError for anything but a stack."""
        if self._carry is not None:
            carried, self._carry = self._carry, None
            return carried
        event = self._next_event(got, count)
        if isinstance(event, End) and count is None:
            return None
        if isinstance(event, Failed):
            raise event.error
        if isinstance(event, End):
            raise AcquisitionCancelled(self._short_message(event, got, count))
        if not isinstance(event, Stack):
            raise AcquisitionError(self._short_message(event, got, count))
        return event, 0

    def _next_event(self, got: int, count: int | None) -> Event:
        try:
            return self._events.get(timeout=self._timeout + 1.0)
        except queue.Empty:
            raise AcquisitionError(f"{self.what}: no frame for {self._timeout + 1.0:g} s after {got} of "
                                   f"{count if count is not None else 'the'} frames") from None

    def _release(self, slot: int) -> None:
        assert self._slab is not None
        self._slab.free.put(slot)

    def _drop_carry(self) -> None:
        if self._carry is not None:
            self._release(self._carry[0].slot)
            self._carry = None


class SocketStackReceiver(StackReceiver):
    """A :class:`StackReceiver` reading one TCP socket (Merlin, ASI Timepix3): ``close()`` makes a
    blocked read return by shutting the socket down, and the socket is closed after the reader thread."""

    _sock: socket.socket | None = None  # set by the subclass's _connect

    def _wake(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None


class ReusedArrays:
    """The arrays :meth:`StackReceiver.frames` decodes into, reused once nothing else holds them.

    Each array goes to the run (a partition's frames), and the receiver is not told when the run is
    done with it. A fresh array costs the decoding thread a page fault and a zeroed page per 4 KiB
    on first touch, every time for arrays of 32 MiB and more (glibc maps them anew and unmaps them
    on free: 256 frames of 256x256 uint16, a live scan's default partition): measured 27-48 against
    18-22 us a frame to fill one. So the last ``keep`` arrays made are tracked, and ``take`` reuses
    one of the shape and dtype asked whose only references are this object's: CPython counts every
    holder (a task, a tile or any other view, a memoryview, a pickle buffer hold a reference to the
    array or to a view of it), so an array still read anywhere is never written again. ``keep``
    covers a stream's partitions in flight; more in use at once only means fresh arrays again.

    >>> arrays = ReusedArrays()
    >>> a = arrays.take((4, 2), np.dtype("uint16"))
    >>> arrays.take((4, 2), np.dtype("uint16")) is a   # still held (by ``a``): another array
    False
    >>> del a; b = arrays.take((4, 2), np.dtype("uint16")); arrays.reused
    1
    """

    #: References to an idle tracked array while :meth:`take` looks at it: the list, the loop
    #: variable and ``sys.getrefcount``'s argument.
    _IDLE_REFS = 3

    def __init__(self, keep: int = 6):
        self.keep = keep
        self._arrays: list[np.ndarray] = []
        #: Arrays made, and takes served by an idle one.
        self.made = 0
        self.reused = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        for a in self._arrays:
            if a.shape == shape and a.dtype == dtype and sys.getrefcount(a) <= self._IDLE_REFS:
                self.reused += 1
                return a
        a = np.empty(shape, dtype)
        self.made += 1
        self._arrays.append(a)
        if len(self._arrays) > self.keep:
            del self._arrays[0]  # the oldest is no longer tracked (its holders keep it as long as they need)
        return a

    def clear(self) -> None:
        """Track nothing any more (what is idle is freed)."""
        self._arrays.clear()


def _batch_size(got: int, batch: tuple[int, int] | None, available: int) -> int:
    """Frames of the array that starts at frame ``got``: to the next partition boundary, or
    ``available`` (the rest of the stack) without ``batch``."""
    if batch is None:
        return available
    fpp, scan = batch
    in_scan = got % scan
    return min(fpp - (in_scan % fpp), scan - in_scan)


#: A live acquisition's scan is cut into at least this many partitions by default (a stream of a file
#: or a pipeline: 8). Each partition costs the run a fixed ~1 ms of CPU (the UDFs' per-partition
#: instances and buffers, the merge, the partial result) on the cores that the receiver and, on one
#: machine, the detector's sender need too: benchmarks/bench_live.py's 32x32 scans of 256x256 uint16
#: frames go from 128 to 256 frames a partition, LiberTEM-live's Merlin default, which saves 4-6 us of
#: CPU a frame in the run thread (fixed cost 5-6 -> 3-4 us, the UDFs' kernels ~25). Measured on a shared
#: machine: cheaper in all for R12 and DECTRIS; for Merlin U16 near its limit the decoding got about as
#: much dearer (three 32 MiB partitions in flight leave the cache), see docs/live.md "Measured"; 8
#: here is the old partitioning. At 10,000 frames/s a partition of 256 frames takes 26 ms: partial
#: results still come at ~40 a second.
LIVE_MIN_PARTITIONS_PER_SCAN = 4


def live_frames_per_partition(nav_shape: tuple[int, ...], sig_shape: tuple[int, ...], dtype: Any) -> int:
    """The default frames per partition of a live acquisition of this geometry: about
    ``PARTITION_BYTES`` of raw frames (256 frames of 256x256 uint16), and at least
    :data:`LIVE_MIN_PARTITIONS_PER_SCAN` partitions per scan.

    >>> live_frames_per_partition((32, 32), (256, 256), "uint16")
    256
    >>> live_frames_per_partition((16, 16), (256, 256), "uint16")
    64
    """
    from raytile.io.formats.stream import default_frames_per_partition

    scan = int(np.prod(nav_shape))
    frame_bytes = int(np.prod(sig_shape)) * np.dtype(dtype).itemsize
    return default_frames_per_partition(scan, frame_bytes, LIVE_MIN_PARTITIONS_PER_SCAN)


def partition_batches(nav_shape: tuple[int, ...], sig_shape: tuple[int, ...] | None,
                      dtype: Any) -> tuple[int, int] | None:
    """``batch`` for :meth:`StackReceiver.frames`: the default partition size of a live acquisition of
    this geometry (:func:`live_frames_per_partition`) and the scan's frames; None when the signal shape
    is not known."""
    if sig_shape is None:
        return None
    return live_frames_per_partition(nav_shape, sig_shape, dtype), int(np.prod(nav_shape))


class AcquisitionFrames:
    """An acquisition's frame arrays (an iterable for the ``stream`` data set) with its
    :class:`AcquisitionStats`; iterating calls ``make(self)``, a generator of the arrays that reads
    :attr:`stats` and :attr:`batch`. ``LiveContext.make_acquisition`` sets ``batch`` to the data set's
    partitioning, so arrays come cut where its partitions are (no copy in the stream). Each iteration
    reads the next frames from the connection (:class:`~raytile.io.formats.stream.RepeatableSource`):
    one run after another on the same acquisition reads scan after scan, as in LiberTEM-live."""

    #: One run after another may read it, each the next scan(s).
    repeatable = True

    def __init__(self, make: Callable[["AcquisitionFrames"], Iterator[np.ndarray]],
                 batch: tuple[int, int] | None = None):
        self.stats = AcquisitionStats()
        #: ``(frames_per_partition, scan_frames)`` of the stream the arrays go to (None: one per stack).
        self.batch = batch
        self._make = make

    @property
    def frames_dropped(self) -> int:
        """Frames the sender lost so far (:class:`~raytile.io.formats.stream.LossReporting`: each partial
        result of a run on the acquisition counts them)."""
        return self.stats.frames_dropped

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._make(self)
