"""The ``raw`` format: one binary file of frames of one dtype, no headers."""

from __future__ import annotations

import math
import os
import warnings
from functools import lru_cache

import numpy as np

from raytile.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.shape import Shape
from raytile.io.slice import Slice


def parse_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise DataSetException(f"unknown dtype {dtype!r}: {e}") from None


@lru_cache(maxsize=64)
def open_memmap(path: str, offset: int, dtype: str, shape: tuple[int, ...]) -> np.memmap:
    """A read-only memmap, cached per process so tasks do not reopen files."""
    return np.memmap(path, mode="r", dtype=np.dtype(dtype), offset=offset, shape=shape)


class FileFramesPartition(Partition):
    """Frames ``[start, stop)`` of a file of equally sized frames, via mmap.

    ``sync_offset`` moves the nav axis against the file: positive skips
    frames at the start of the file, negative prepends blank (zero) frames.
    """

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, path: str,
                 offset: int, file_frames: int):
        super().__init__(meta, partition_slice, idx)
        self.path = path
        self.offset = offset
        self.file_frames = file_frames

    def _source(self):
        sig = self.meta.shape.sig.to_tuple()
        mm = open_memmap(self.path, self.offset, self.meta.raw_dtype.str, (self.file_frames,) + sig)
        first = self.start + self.meta.sync_offset
        last = self.stop + self.meta.sync_offset
        if first >= 0 and last <= self.file_frames:
            return mm[first:last]
        out = np.zeros((self.stop - self.start,) + sig, dtype=self.meta.raw_dtype)
        lo, hi = max(first, 0), min(last, self.file_frames)
        if hi > lo:
            out[lo - first:hi - first] = mm[lo:hi]
        return out

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {self.path}"


def check_file(path: str) -> int:
    if not os.path.exists(path):
        raise DataSetException(f"file not found: {path}")
    if not os.path.isfile(path):
        raise DataSetException(f"not a regular file: {path}")
    return os.path.getsize(path)


class RawFileDataSet(DataSet):
    """Read frames from one headerless binary file.

    Parameters: ``path``, ``nav_shape``, ``sig_shape``, ``dtype``, and
    optionally ``sync_offset`` (frames to skip at the start of the file;
    negative values insert blank frames).
    """

    format_name = "raw"

    def __init__(self, path, nav_shape, sig_shape, dtype, sync_offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._path = os.fspath(path)
        self._nav_shape = tuple(int(v) for v in nav_shape)
        self._sig_shape = tuple(int(v) for v in sig_shape)
        self._dtype = parse_dtype(dtype)
        self._sync_offset = int(sync_offset)
        if not self._nav_shape or not self._sig_shape or min(self._nav_shape + self._sig_shape) <= 0:
            raise DataSetException(
                f"nav_shape {self._nav_shape} and sig_shape {self._sig_shape} must be non-empty and positive"
            )

    def _do_initialize(self) -> DataSetMeta:
        size = check_file(self._path)
        frame_bytes = math.prod(self._sig_shape) * self._dtype.itemsize
        if size % frame_bytes:
            raise DataSetException(
                f"{self._path}: file size {size} is not a multiple of the frame size {frame_bytes} "
                f"(sig_shape {self._sig_shape}, dtype {self._dtype}); check sig_shape and dtype"
            )
        self._file_frames = size // frame_bytes
        needed = math.prod(self._nav_shape) + max(self._sync_offset, 0)
        if self._file_frames < needed and self._sync_offset == 0:
            raise DataSetException(
                f"{self._path}: file holds {self._file_frames} frames of {self._sig_shape} {self._dtype}, "
                f"but nav_shape {self._nav_shape} needs {needed}; the file is too short or the shape is wrong"
            )
        if self._file_frames > needed and self._sync_offset == 0:
            warnings.warn(
                f"{self._path} holds {self._file_frames} frames, nav_shape {self._nav_shape} reads "
                f"only the first {needed}", stacklevel=2,
            )
        shape = Shape(self._nav_shape + self._sig_shape, sig_dims=len(self._sig_shape))
        return DataSetMeta(shape=shape, raw_dtype=self._dtype, sync_offset=self._sync_offset)

    def get_cache_key(self):
        st = os.stat(self._path)
        return ("raw", os.path.abspath(self._path), st.st_mtime_ns, st.st_size, self.shape.to_tuple(),
                self.dtype.str, self._sync_offset)

    def get_partitions(self) -> list[Partition]:
        return [
            FileFramesPartition(self.meta, sl, idx, self._path, 0, self._file_frames)
            for idx, sl in enumerate(self.get_slices())
        ]
