"""A stream's way into a run: the bounded `PartitionInlet` and the `StreamFeeder` thread that fills it.

The feeder pulls a data set's partition source
(:class:`~raytile.io.partition_source.PartitionSource`, a stream's) in a
thread of its own (the source may block, sleep or be slow: the coordinator's
loop never waits on it), hands each partition's frames to ``share`` (the
executor's: on Ray a copy into a shared-memory slot of the driver's node or
``ray.put``, nothing inline) and delivers ``(index, handle)`` with
``deliver``. A partition assembled from several batches is built in
memory the executor lends (on Ray a shared-memory slot: no copy at
``share``), or else in an array of a :class:`BufferRecycler`, reused
for a later partition once ``share`` copied it. In the driver's coordinator ``deliver`` is
:meth:`PartitionInlet.put`; with the coordinator on the cluster it is a call
of the coordinator actor that puts into the actor's inlet (see
actors/actor_host.py), so the same inlet bounds both.

The inlet holds at most ``capacity`` partitions between their arrival and
the end of their task (:meth:`PartitionInlet.release`): ``put`` blocks
when it is full, so the source is not read further (backpressure) and
nothing is dropped. The coordinator takes arrivals without blocking
(:meth:`PartitionInlet.take`); a failure of the source reaches it as the
exception the feeder put (:meth:`PartitionInlet.fail`).
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any, Callable

import numpy as np

from raytile.common.errors import DataSetException, RaytileError
from raytile.io.dataset import DataSet
from raytile.io.partition_source import StreamStopped

__all__ = ["PartitionInlet", "StreamFeeder", "BufferRecycler", "InletClosed", "NO_RECOMPUTE"]

#: Why a stream run refuses ``update_parameters(..., recompute=True)``.
NO_RECOMPUTE = ("update_parameters(recompute=True) is not possible on a stream: its frames are gone once "
                "processed; patch without recompute (partitions from now on use the new parameters)")


class InletClosed(Exception):
    """The run the inlet fed is over (finished, failed or cancelled): stop reading the stream."""


class PartitionInlet:
    """Partitions of a stream that arrived and are not done yet, at most ``capacity``.

    ``on_change`` is called after every put, end and failure (the
    coordinator's wakeup event).

    >>> inlet = PartitionInlet(4, wakeup.set)
    >>> inlet.put(0, frames)        # producer side: blocks while 4 are outstanding
    >>> inlet.take()                # coordinator side: [(0, frames)], never blocks
    >>> inlet.release(0)            # its task is done: room for the next
    """

    def __init__(self, capacity: int, on_change: Callable[[], None] | None = None):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._on_change = on_change
        self._cond = threading.Condition()
        self._arrived: deque[tuple[int, Any]] = deque()
        self._outstanding: set[int] = set()
        self._ended = False
        self._error: BaseException | None = None
        self._closed = False
        #: The most partitions that were outstanding at once (the measured memory bound).
        self.max_outstanding = 0
        #: Partitions that arrived in all.
        self.arrivals = 0

    def put(self, idx: int, frames: Any, timeout: float | None = None) -> None:
        """Hand over partition ``idx``; blocks while ``capacity`` partitions are outstanding.

        Raises :class:`InletClosed` if the run is over, TimeoutError after ``timeout``."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._closed or len(self._outstanding) < self.capacity, timeout):
                raise TimeoutError(f"the run took no partition within {timeout} s")
            if self._closed:
                raise InletClosed("the run is over")
            self._arrived.append((idx, frames))
            self._outstanding.add(idx)
            self.arrivals += 1
            self.max_outstanding = max(self.max_outstanding, len(self._outstanding))
        self._changed()

    def end(self) -> None:
        """The stream ended: no more partitions."""
        with self._cond:
            self._ended = True
        self._changed()

    def fail(self, error: BaseException) -> None:
        """The stream failed: the run ends with ``error``."""
        with self._cond:
            if self._error is None:
                self._error = error
        self._changed()

    def close(self) -> None:
        """The run is over: wake and refuse producers; what arrived is dropped."""
        with self._cond:
            self._closed = True
            self._arrived.clear()
            self._cond.notify_all()

    def take(self) -> list[tuple[int, Any]]:
        """What arrived since the last call (never blocks); raises the stream's failure."""
        with self._cond:
            if self._error is not None:
                raise self._error
            arrived = list(self._arrived)
            self._arrived.clear()
            return arrived

    def release(self, idx: int) -> None:
        """Partition ``idx`` is done (its task returned): room for another."""
        with self._cond:
            self._outstanding.discard(idx)
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        """True once the stream ended and everything that arrived was taken."""
        with self._cond:
            return self._ended and not self._arrived

    @property
    def outstanding(self) -> int:
        with self._cond:
            return len(self._outstanding)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


class BufferRecycler:
    """Arrays a stream's partitions are assembled in, reused once their frames were copied on.

    A fresh array for every partition costs a page fault per 4 KiB on first touch (measured as much
    time as the copy into it); a reused one is warm. ``take`` gives back an array it made and was
    given back, if one of that shape and dtype is idle; ``give`` ignores arrays it did not make (the
    source's own batches, handed on as they are).

    >>> buffers = BufferRecycler()
    >>> a = buffers.take((128, 256, 256), np.dtype("uint16"))
    >>> buffers.give(a)                      # copied on: the next take returns it
    """

    def __init__(self, keep: int = 2):
        self.keep = keep
        self._made: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()
        self._idle: list[np.ndarray] = []
        #: Arrays made, and takes served by a reused one.
        self.made = 0
        self.reused = 0

    def take(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        for i, a in enumerate(self._idle):
            if a.shape == tuple(shape) and a.dtype == dtype:
                self.reused += 1
                return self._idle.pop(i)
        a = np.empty(shape, dtype=dtype)
        self._made[id(a)] = a
        self.made += 1
        return a

    def give(self, a: np.ndarray) -> None:
        if self._made.get(id(a)) is not a or any(b is a for b in self._idle):
            return
        if len(self._idle) < self.keep:
            self._idle.append(a)


class StreamFeeder:
    """Pulls a data set's partition source in a daemon thread and delivers its partitions.

    ``deliver(idx, handle)`` may block (backpressure) and raises
    :class:`InletClosed` when the run is over; ``finish(None)`` is called
    when the stream ended, ``finish(error)`` when it failed. A partition
    assembled from several batches is built in ``allocate(shape, dtype)``
    (the executor's :meth:`~raytile.runtime.executor.Executor.stream_buffer`,
    memory ``share`` may pass on without a copy), else in a
    :class:`BufferRecycler`'s arrays, reused once ``share`` copied them.
    """

    def __init__(self, dataset: DataSet, deliver: Callable[[int, Any], None],
                 finish: Callable[[BaseException | None], None], share: Callable[[Any], Any] = lambda a: a,
                 name: str = "raytile-stream", allocate: Callable[[tuple, np.dtype], np.ndarray] | None = None):
        self._dataset = dataset
        self._deliver = deliver
        self._finish = finish
        self._share = share
        self._allocate = allocate
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The run is over (cancelled): pull the source no more and close it. A pull under way ends
        first (a source is not interrupted); ``deliver`` is to raise InletClosed if it waits."""
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _main(self) -> None:
        error: BaseException | None = None
        buffers: BufferRecycler | None = None
        allocate = self._allocate
        if allocate is None:  # the executor lends none: arrays of our own, reused
            buffers = BufferRecycler()
            allocate = buffers.take
        try:
            parts = self._dataset.partition_source().pull(allocate, self._stopped.is_set)
            try:
                for idx, frames in parts:
                    shared = self._share(frames)
                    if buffers is not None and shared is not frames:  # copied on: reuse the array
                        buffers.give(frames)
                    del frames
                    self._deliver(idx, shared)
            finally:
                parts.close()
        except (InletClosed, StreamStopped):
            return
        except RaytileError as e:
            if self._stopped.is_set():  # the run is over: nobody waits for the stream's end
                return
            error = e
        except Exception as e:  # noqa: BLE001  (sharing the frames failed: the run ends with it)
            error = DataSetException(f"the stream's frames could not be handed to the workers: "
                                     f"{type(e).__name__}: {e}")
        try:
            self._finish(error)
        except InletClosed:
            pass
