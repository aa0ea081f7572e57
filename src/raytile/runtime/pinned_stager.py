"""`PinnedStager`: numpy tiles to the GPU through pinned host buffers, copy overlapping compute."""

from __future__ import annotations

import numpy as np

__all__ = ["PinnedStager"]


class _Slot:
    __slots__ = ("capacity", "host_mem", "dev_mem", "key", "host", "dev", "released")

    def __init__(self):
        self.capacity = 0
        self.host_mem = self.dev_mem = None
        self.key = None
        self.host = self.dev = None
        self.released = None


class PinnedStager:
    """numpy -> cupy tile copies through pinned host buffers, overlapping copy and compute.

    Each tile is copied (by the CPU) into one of ``slots`` pinned host
    buffers and from there asynchronously to a device buffer on a private
    copy stream; the compute stream waits for that copy with an event. While
    the GPU works on tile *i*, the CPU already reads tile *i+1* into the other
    pinned buffer and starts its upload. A slot is reused only after the
    compute stream has finished the tile that was in it (:meth:`tile_done`
    records that event), so the device array handed out is valid until the
    tile after next, the same rule as for reused CPU tile buffers.
    """

    def __init__(self, compute_stream, slots: int = 2):
        import cupy

        self._cp = cupy
        self._compute = compute_stream
        self._copy = cupy.cuda.Stream(non_blocking=True)
        self._slots = [_Slot() for _ in range(max(1, slots))]
        self._next = 0
        self._pending: list[_Slot] = []
        self.bytes_copied = 0
        self.tiles_copied = 0

    def to_device(self, arr):
        cp = self._cp
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if slot.released is not None:
            slot.released.synchronize()
            slot.released = None
        arr = np.asarray(arr)
        key = (arr.shape, arr.dtype.str)
        if slot.key != key:
            nbytes = max(1, arr.nbytes)
            if slot.capacity < nbytes:
                slot.host_mem = cp.cuda.alloc_pinned_memory(nbytes)
                slot.dev_mem = cp.cuda.alloc(nbytes)
                slot.capacity = nbytes
            slot.host = np.frombuffer(slot.host_mem, dtype=arr.dtype, count=arr.size).reshape(arr.shape)
            slot.dev = cp.ndarray(arr.shape, dtype=arr.dtype, memptr=slot.dev_mem)
            slot.key = key
        np.copyto(slot.host, arr, casting="no")
        slot.dev.set(slot.host, stream=self._copy)
        self._compute.wait_event(self._copy.record())
        self._pending.append(slot)
        self.bytes_copied += arr.nbytes
        self.tiles_copied += 1
        return slot.dev

    def tile_done(self) -> None:
        """Call after every UDF has queued its work on the current tile."""
        if self._pending:
            done = self._compute.record()
            for slot in self._pending:
                slot.released = done
            self._pending = []
