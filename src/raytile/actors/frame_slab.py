"""`FrameSlab`: a stream's partitions handed to the workers of this node through reused shared memory.

Why not ``ray.put`` for every partition: on a small machine the object
store hands each new object memory that this process has not touched
before, so every put faults in fresh pages (measured on 2 cores: 130k page
faults and 0.4 s of system time for 512 MiB of 16 MiB puts, a put 3-5x
slower than a copy), and the workers fault the same pages in again when
they map them. A stream cycles through a few partitions' worth of memory
over and over, so the driver keeps that memory itself:

- :class:`FrameSlab` (driver) owns slots, files in ``/dev/shm`` mapped
  once and reused. :meth:`FrameSlab.allocate` lends a slot as an array
  to assemble a partition in, and :meth:`FrameSlab.share` turns it into a
  :class:`SlabFrames` handle without a copy (any other array is copied
  into a free slot); both give None when no slot is free and no more may
  be made (the caller then uses ``np.empty`` and ``ray.put``).
- The slot goes back to the slab when the driver's handle is garbage
  collected: the run drops a partition's task, and with it the handle,
  once the task returned (or the run is over), as it drops an object ref.
  A worker's copy of the handle (unpickled) holds no slot.
- :class:`SlabReader` (worker) maps a slot's file once and returns
  read-only zero-copy views of it.

Only workers on the driver's node can read a slot: the executor sends a
partition to a worker elsewhere as an object ref (``ray.put`` of the slot's
frames) instead. This module does not import ray.

>>> slab = FrameSlab(max_bytes=64 << 20)
>>> part = slab.allocate((128, 256, 256), np.dtype("uint16"))  # fill it with frames
>>> handle = slab.share(part)             # no copy (None: use ray.put)
>>> SlabReader().view(handle)             # in a worker: a read-only view of the same memory
"""

from __future__ import annotations

import mmap
import os
import queue
import secrets
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["FrameSlab", "SlabFrames", "SlabReader", "SHM_DIR", "SLAB_BYTES", "SLAB_SHM_SHARE"]

#: Where slots live: a RAM file system every process on the node sees.
SHM_DIR = "/dev/shm"
#: The most bytes a slab keeps in slots (more partitions in flight than fit go through the object store).
SLAB_BYTES = 512 * 1024 * 1024
#: ... and at most this share of the free space of ``SHM_DIR`` when a slot is made.
SLAB_SHM_SHARE = 0.25


class _Lease:
    """Holds a slot for the driver's handle; returns it to the slab when collected (a ``SimpleQueue``
    put, safe from any thread and from a finaliser)."""

    __slots__ = ("_free", "_slot", "__weakref__")

    def __init__(self, free: "queue.SimpleQueue[int]", slot: int):
        self._free = free
        self._slot = slot

    def __del__(self) -> None:
        self._free.put(self._slot)


class SlabFrames:
    """A partition's frames in a slab slot: the slot's file, the frames' shape and dtype.

    Pickles to the same description without the slot's lease: only the
    driver's handle keeps the slot from being reused.
    """

    __slots__ = ("path", "shape", "dtype", "_lease")

    def __init__(self, path: str, shape: tuple[int, ...], dtype: str, lease: _Lease | None = None):
        self.path = path
        self.shape = tuple(shape)
        self.dtype = dtype
        self._lease = lease

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __reduce__(self) -> tuple:
        return (SlabFrames, (self.path, self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"SlabFrames({os.path.basename(self.path)}, {self.shape}, {self.dtype})"


class _Slot:
    def __init__(self, path: str, size: int):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path = path
        self.size = size

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.ndarray(shape, dtype=dtype, buffer=self.map)


def _unlink(paths: list[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


class FrameSlab:
    """Reused shared-memory slots for stream partitions, at most ``max_bytes`` in all (see the module doc).

    Thread-safe. :meth:`close` (and the interpreter's exit) removes the slots' files.
    """

    def __init__(self, max_bytes: int = SLAB_BYTES, directory: str = SHM_DIR):
        self.max_bytes = max_bytes
        self.directory = directory
        self._prefix = os.path.join(directory, f"raytile-slab-{os.getpid()}-{secrets.token_hex(4)}-")
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._idle: list[int] = []  # slots no handle holds
        self._returned: "queue.SimpleQueue[int]" = queue.SimpleQueue()
        self._paths: list[str] = []
        self._lent: dict[int, tuple[Any, _Lease, int]] = {}  # id(array from allocate) -> (weakref, lease, slot)
        self._closed = False
        self._usable = os.path.isdir(directory) and os.access(directory, os.W_OK)
        self._finalizer = weakref.finalize(self, _unlink, self._paths)
        #: Partitions shared through a slot, and those refused (no slot free: the caller used the object store).
        self.shared = 0
        self.refused = 0

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self._slots)

    def allocate(self, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
        """A writable array in a free slot, to assemble a partition in: :meth:`share` of it then
        copies nothing. The slot comes back when the array is collected unless it was shared.
        None if no slot is free and no more fit."""
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            return None
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            return None
        with self._lock:
            slot_no = self._take(nbytes)
            if slot_no is None:
                self.refused += 1
                return None
            view = self._slots[slot_no].array(tuple(shape), dtype)
            self._lent[id(view)] = (weakref.ref(view), _Lease(self._returned, slot_no), slot_no)
        weakref.finalize(view, self._lent.pop, id(view), None)
        return view

    def share(self, frames: Any) -> SlabFrames | None:
        """``frames`` as a handle that holds their slot until it is collected: an array from
        :meth:`allocate` as it is, any other numpy array copied into a free slot; None if ``frames``
        is not a plain numpy array or no slot is free and no more fit."""
        lent = self._lent.pop(id(frames), None)
        if lent is not None and lent[0]() is frames:
            self.shared += 1
            path = self._slots[lent[2]].path
            return SlabFrames(path, frames.shape, frames.dtype.str, lent[1])
        if not isinstance(frames, np.ndarray) or frames.dtype.hasobject or frames.nbytes == 0:
            return None
        with self._lock:
            slot_no = self._take(frames.nbytes)
            if slot_no is None:
                self.refused += 1
                return None
            slot = self._slots[slot_no]
            self.shared += 1
        np.copyto(slot.array(frames.shape, frames.dtype), frames, casting="no")
        return SlabFrames(slot.path, frames.shape, frames.dtype.str, _Lease(self._returned, slot_no))

    def array(self, handle: SlabFrames) -> np.ndarray:
        """The driver's view of a handle's frames (to put them into the object store for a worker
        on another node); valid while the handle lives."""
        for slot in self._slots:
            if slot.path == handle.path:
                return slot.array(handle.shape, np.dtype(handle.dtype))
        raise KeyError(f"{handle!r} is not a slot of this slab")

    def _take(self, nbytes: int) -> int | None:
        while True:
            try:
                self._idle.append(self._returned.get_nowait())
            except queue.Empty:
                break
        if self._closed or not self._usable:
            return None
        fitting = [i for i in self._idle if self._slots[i].size >= nbytes]
        if fitting:
            best = min(fitting, key=lambda i: self._slots[i].size)  # the smallest that holds it
            self._idle.remove(best)
            return best
        if self.bytes + nbytes > self.max_bytes:
            return None
        try:
            st = os.statvfs(self.directory)
            if nbytes > SLAB_SHM_SHARE * st.f_bavail * st.f_frsize:
                return None
            path = f"{self._prefix}{len(self._slots)}"
            self._paths.append(path)
            self._slots.append(_Slot(path, nbytes))
        except OSError:
            self._usable = False
            return None
        return len(self._slots) - 1

    def close(self) -> None:
        """Remove the slots' files; later shares return None. Views still held stay valid (the
        memory goes when the last mapping does)."""
        with self._lock:
            self._closed = True
            self._slots, self._idle = [], []
        self._finalizer()


class SlabReader:
    """A worker's read-only mappings of slab slots, the ``capacity`` most recently used kept open."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._maps: "OrderedDict[str, mmap.mmap]" = OrderedDict()
        self._lock = threading.Lock()

    def view(self, handle: SlabFrames) -> np.ndarray:
        """The handle's frames, a read-only view of the slot (mapped at the first use of the slot)."""
        with self._lock:
            mm = self._maps.get(handle.path)
            if mm is None:
                fd = os.open(handle.path, os.O_RDONLY)
                try:
                    mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                finally:
                    os.close(fd)
                self._maps[handle.path] = mm
                while len(self._maps) > self.capacity:
                    self._maps.popitem(last=False)  # closed when no view of it is left
            self._maps.move_to_end(handle.path)
        return np.ndarray(handle.shape, dtype=np.dtype(handle.dtype), buffer=mm)

    def __len__(self) -> int:
        return len(self._maps)
