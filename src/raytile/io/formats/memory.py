"""The ``memory`` format: a numpy array already in RAM."""

from __future__ import annotations

import copy
from abc import abstractmethod
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException, DataSetShapeError
from raytile.io.dataset import DataSet, DataSetMeta, FrameDelivery, Partition
from raytile.common.shape import Shape
from raytile.common.slice import Slice

__all__ = ["ArrayDataSet", "MemoryDataSet", "MemoryPartition"]


def _is_sparse(data: Any) -> bool:
    """pydata ``sparse`` arrays and scipy.sparse matrices/arrays."""
    module = type(data).__module__
    return module.startswith("sparse") or module.startswith("scipy.sparse")


class MemoryPartition(Partition):
    """A partition that carries its own frames (``data``: ``(frames, *sig)``).

    ``data`` may be replaced by an executor with a read-only view of shared
    memory (the Ray object store) so that no copy is made on the worker.
    Dense numpy frames are SHARED (sent once, see
    :func:`~raytile.io.partition_source.dense_frames`);
    other arrays travel with the task (CARRIED).
    """

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, data: Any,
                 tileshape: tuple[int, ...] | None = None):
        super().__init__(meta, partition_slice, idx)
        self.data = data
        self.tileshape = tileshape

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        """The data set's ``tileshape`` when given (LiberTEM's memory data set forces it)."""
        return tileshape if self.tileshape is None else tuple(self.tileshape)

    @property
    def frame_delivery(self) -> FrameDelivery:
        """SHARED for dense numpy frames (and for a partition whose frames were taken off), else CARRIED."""
        return FrameDelivery.SHARED if self.data is None or isinstance(self.data, np.ndarray) \
            else FrameDelivery.CARRIED

    def shared_frames(self) -> np.ndarray | None:
        return self.data if isinstance(self.data, np.ndarray) else None

    def _source(self):
        return self.data

    def without_frames(self) -> "MemoryPartition":
        """A copy without its frames, to send where they arrive another way (shared memory)."""
        light = copy.copy(self)
        light.data = None
        return light


class ArrayDataSet(DataSet):
    """A data set over an array the driver already holds, dense or sparse: the base of
    :class:`MemoryDataSet` and :class:`~raytile.io.formats.sparse.SparseMemoryDataSet`.

    It keeps the array and LiberTEM's shape parameters (``sig_dims``,
    ``nav_shape``, ``sig_shape``), reads the nav and sig shapes off them
    (:meth:`_nav_sig`), and cuts partitions out of the frames a subclass makes
    of the array in :meth:`_do_initialize` (:attr:`_frames`, one row a nav
    position: a numpy view, a CSR matrix); the subclass says which partition
    holds such a run of frames (:meth:`_partition`).
    """

    def __init__(self, data: Any, sig_dims: int, nav_shape: tuple[int, ...] | None,
                 sig_shape: tuple[int, ...] | None, **kwargs: Any):
        super().__init__(**kwargs)
        self._data = data
        self._sig_dims = sig_dims
        self._nav_shape = None if nav_shape is None else tuple(int(n) for n in nav_shape)
        self._sig_shape = None if sig_shape is None else tuple(int(n) for n in sig_shape)
        #: the frames partitions are cut from, set by ``_do_initialize``
        self._frames: Any = None

    def _nav_sig(self, full: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The nav and sig shape of data shaped ``full``: ``nav_shape`` and ``sig_shape`` where given, else
        ``full`` split before its last ``sig_dims`` axes."""
        split = len(full) - self._sig_dims
        sig = self._sig_shape or tuple(int(n) for n in full[split:])
        nav = self._nav_shape or tuple(int(n) for n in full[:split])
        return nav, sig

    def get_cache_key(self) -> Any:
        return (self.format_name, id(self._data), self.shape.to_tuple(), self.meta.sync_offset)

    def get_partitions(self) -> list[Partition]:
        return [self._partition(sl, idx, self._frames[sl.origin[0]:sl.origin[0] + sl.shape[0]])
                for idx, sl in enumerate(self.get_slices())]

    @abstractmethod
    def _partition(self, partition_slice: Slice, idx: int, frames: Any) -> Partition:
        """The partition ``idx`` at ``partition_slice``, holding ``frames`` (its rows of :attr:`_frames`)."""


class MemoryDataSet(ArrayDataSet):
    """Wrap an in-memory array; the last ``sig_dims`` axes are the signal.

    A sparse array (``sparse.COO``/``GCXS``, or a scipy.sparse matrix of
    ``(frames, pixels)`` with ``sig_shape``) gives a
    :class:`~raytile.io.formats.sparse.SparseMemoryDataSet` instead, whose
    tiles come natively sparse.

    As LiberTEM's memory data set: ``tileshape`` (``(depth, *sig)``) fixes the
    tiles' shape (whole frames still go to UDFs that need them), and
    ``sync_offset`` shifts the frames: nav position ``i`` holds frame
    ``i + sync_offset``, positions past either end hold zeros. ``nav_shape``
    and ``sig_shape`` may regroup the data's values (``sig_shape=(19 * 23,)``
    for frames of 19 x 23), and ``nav_shape`` may hold fewer or more positions
    than the data has frames (those past the end read zeros), as LiberTEM
    reads them.

    >>> ds = ctx.load("memory", data=np.zeros((8, 8, 32, 32), dtype="uint16"))
    """

    format_name = "memory"
    params_schema = {
        "data": {"type": "array", "required": "by_format"},  # __init__ raises LiberTEM's DataSetException
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "tileshape": {"type": "shape"},
        "sync_offset": {"type": "int"},
    }

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any):
        if cls is MemoryDataSet and _is_sparse(data):
            from raytile.io.formats.sparse import SparseMemoryDataSet

            return SparseMemoryDataSet(data, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, data: Any = None, sig_dims: int | None = None, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, tileshape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, **kwargs):
        if data is None:
            raise DataSetException("memory: give data, the array to read (LiberTEM's MemoryDataSet also takes "
                                   "datashape: zeros of that shape)")
        super().__init__(data, _sig_dims(data, sig_dims, nav_shape, sig_shape), nav_shape, sig_shape, **kwargs)
        self._tileshape = None if tileshape is None else tuple(int(t) for t in tileshape)
        self._sync_offset = int(sync_offset)

    def _do_initialize(self) -> DataSetMeta:
        data = self._data
        if data.ndim < self._sig_dims + 1 and self._nav_shape is None:
            raise DataSetException(
                f"memory data of shape {data.shape} has no nav axis for sig_dims={self._sig_dims}"
            )
        nav, sig = self._nav_sig(data.shape)
        shape = Shape(nav + sig, sig_dims=len(sig))
        frame_size = int(np.prod(sig))
        if frame_size == 0 or data.size % frame_size:
            raise DataSetShapeError(
                f"memory data of shape {data.shape} (size {data.size}) is no whole number of frames "
                f"of sig_shape {sig}"
            )
        if self._tileshape is not None and len(self._tileshape) != len(sig) + 1:
            raise DataSetException(f"memory: tileshape {self._tileshape} must be (depth, *sig) for sig {sig}")
        frames = data.reshape((data.size // frame_size, *sig))
        self._frames = _nav_frames(frames, shape.nav.size, self._sync_offset)
        return DataSetMeta(shape=shape, raw_dtype=np.dtype(data.dtype), sync_offset=self._sync_offset,
                           image_count=frames.shape[0])

    @property
    def data(self):
        """The data, frames flattened: ``(num_frames, *sig)``."""
        return self._frames

    def _partition(self, partition_slice: Slice, idx: int, frames: Any) -> Partition:
        return MemoryPartition(self.meta, partition_slice, idx, frames, self._tileshape)


def _sig_dims(data: Any, sig_dims: int | None, nav_shape: tuple[int, ...] | None,
              sig_shape: tuple[int, ...] | None) -> int:
    """The number of signal axes, as LiberTEM finds it: ``sig_dims``, else ``len(sig_shape)``, else the data's
    axes after ``nav_shape``'s, else 2. DataSetShapeError when ``sig_shape`` and ``sig_dims`` disagree."""
    if sig_dims is not None:
        if sig_shape is not None and len(sig_shape) != sig_dims:
            raise DataSetShapeError(f"memory: sig_shape {tuple(sig_shape)} has {len(sig_shape)} axes, "
                                    f"sig_dims={sig_dims}")
        return int(sig_dims)
    if sig_shape is not None:
        return len(sig_shape)
    if nav_shape is not None and data is not None and data.ndim > len(nav_shape):
        return data.ndim - len(nav_shape)
    return 2


def _nav_frames(frames: Any, nav_size: int, sync_offset: int) -> Any:
    """The frame of each nav position, as LiberTEM's memory data set reads them: position ``i`` holds
    ``frames[i + sync_offset]``, zeros where that is outside the data (``nav_size`` may be smaller or
    larger than the number of frames). A view of ``frames`` when every position has its frame."""
    n = frames.shape[0]
    if not -n < sync_offset < n:
        raise DataSetException(f"memory: sync_offset {sync_offset} must be in ({-n}, {n}), "
                               f"(-image_count, image_count) of the data's {n} frames")
    if sync_offset >= 0 and sync_offset + nav_size <= n:
        return frames[sync_offset:sync_offset + nav_size]
    out = np.zeros((nav_size, *frames.shape[1:]), dtype=frames.dtype)
    first, last = max(0, -sync_offset), min(nav_size, n - sync_offset)  # nav positions that have a frame
    if last > first:
        out[first:last] = frames[first + sync_offset:last + sync_offset]
    return out

