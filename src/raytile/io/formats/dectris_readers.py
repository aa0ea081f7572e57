"""How the workers read a DECTRIS series' frames: chunk bytes decoded by :mod:`raytile.io.bslz4`, or h5py.

:class:`ChunkReader` lists each data file's chunks once per worker
(:class:`ChunkIndex`: offset, size and filter mask of every frame's chunk),
takes their bytes from a file map (``io_backend="mmap"``) or one ``pread``
of their span (``"buffered"``, ``"direct"``: O_DIRECT, page-aligned) and
decodes a block of frames per call of :func:`raytile.io.bslz4.decode_chunks`.
:class:`H5Reader` reads through h5py and HDF5's filters (``hdf5plugin``):
any filter, one core a process. Both fill frames outside the series with
zeros and raise :class:`~raytile.common.errors.DataSetException` naming the
file and frame they cannot read.
"""

from __future__ import annotations

import errno
import math
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io import bslz4
from raytile.io.backends.buffered import ALIGN, _preadv_all, aligned_empty
from raytile.io.formats.dectris_master import LinkedFile, open_h5
from raytile.io.store import DEFAULT_CONCURRENCY, ObjectStore

if TYPE_CHECKING:
    from raytile.io.formats.dectris import DectrisPartition

__all__ = ["ChunkIndex", "ChunkReader", "H5Reader", "frame_reader"]


class ChunkIndex:
    """Byte offset, size and "filter skipped" of every frame's chunk, per data file and worker process."""

    _cache: "OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
    _lock = threading.Lock()
    MAX_FILES = 16

    @classmethod
    def get(cls, lf: LinkedFile, store: ObjectStore | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if store is not None:
            key: tuple = (lf.path, lf.ds_path, store.identity(lf.path))
        else:
            st = os.stat(lf.path)
            key = (lf.path, lf.ds_path, st.st_mtime_ns, st.st_size)
        with cls._lock:
            hit = cls._cache.get(key)
            if hit is not None:
                cls._cache.move_to_end(key)
                return hit
        index = cls._read(lf, store)
        with cls._lock:
            cls._cache[key] = index
            while len(cls._cache) > cls.MAX_FILES:
                cls._cache.popitem(last=False)
        return index

    @staticmethod
    def _read(lf: LinkedFile, store: ObjectStore | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with open_h5(lf.path, lf.path, store) as f:
            ds = f[lf.ds_path]
            n = int(ds.shape[0])
            frame_bytes = math.prod(ds.shape[1:]) * ds.dtype.itemsize
            offsets = np.full(n, -1, dtype=np.int64)
            sizes = np.zeros(n, dtype=np.int64)
            skipped = np.zeros(n, dtype=np.bool_)
            if ds.chunks is None:
                base = ds.id.get_offset()
                if base is None:  # never written: the fill value
                    return offsets, sizes, skipped
                offsets[:] = base + np.arange(n, dtype=np.int64) * frame_bytes
                sizes[:] = frame_bytes
                return offsets, sizes, skipped

            def put(info) -> None:
                i = info.chunk_offset[0]
                offsets[i] = info.byte_offset
                sizes[i] = info.size
                skipped[i] = info.filter_mask != 0

            if hasattr(ds.id, "chunk_iter"):
                ds.id.chunk_iter(put)
            else:
                for k in range(ds.id.get_num_chunks()):
                    put(ds.id.get_chunk_info(k))
        return offsets, sizes, skipped


class ChunkReader:
    """Reads chunk bytes (file map or ``pread``) and decodes them with :func:`raytile.io.bslz4.decode_chunks`."""

    def __init__(self, part: DectrisPartition):
        assert part.codec is not None
        self.part = part
        self.codec: int = part.codec
        self.maps: dict[int, np.ndarray] = {}
        self.fds: dict[int, int] = {}
        self.index: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.scratch = np.empty(0, np.uint8)
        self.pool: ThreadPoolExecutor | None = None
        if part.codec != bslz4.CODEC_RAW:
            bslz4.check_decoder()

    def _bytes(self, fi: int, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes holding the chunks at ``offsets`` and their offsets in them (-1 stays -1)."""
        lf = self.part.files[fi]
        if self.part.store is not None:
            return self._fetch(fi, offsets, sizes)
        if self.part.io_backend == "mmap":
            m = self.maps.get(fi)
            if m is None:
                size = os.path.getsize(lf.path)
                m = self.maps[fi] = np.memmap(lf.path, np.uint8, "r") if size else np.zeros(0, np.uint8)
            return m, offsets
        ok = offsets >= 0
        if not ok.any():
            return np.zeros(0, np.uint8), offsets
        align = ALIGN if self.part.io_backend == "direct" else 1
        lo = int(offsets[ok].min())
        lo -= lo % align
        hi = -(-int((offsets + sizes)[ok].max()) // align) * align
        if self.scratch.shape[0] < hi - lo:
            self.scratch = aligned_empty(hi - lo)
        got = self._pread(fi, self.scratch[:hi - lo], lo)
        return self.scratch[:got], np.where(ok, offsets - lo, -1)

    def _fetch(self, fi: int, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The byte span of the chunks at ``offsets`` from an object store: parallel ranged GETs."""
        store = self.part.store
        assert store is not None
        ok = offsets >= 0
        if not ok.any():
            return np.zeros(0, np.uint8), offsets
        lo = int(offsets[ok].min())
        hi = int((offsets + sizes)[ok].max())
        if self.scratch.shape[0] < hi - lo:
            self.scratch = np.empty(hi - lo, np.uint8)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=DEFAULT_CONCURRENCY, thread_name_prefix="raytile-chunks")
        step = max(256 * 1024, -(-(hi - lo) // DEFAULT_CONCURRENCY))
        pieces = [(a, min(hi, a + step)) for a in range(lo, hi, step)]
        url = self.part.files[fi].path
        for (a, b), data in zip(pieces, store.fetch([(url, a, b) for a, b in pieces], self.pool)):
            self.scratch[a - lo:b - lo] = np.frombuffer(data, np.uint8)
        return self.scratch[:hi - lo], np.where(ok, offsets - lo, -1)

    def _pread(self, fi: int, dest: np.ndarray, offset: int) -> int:
        """``pread`` into ``dest`` (short at the end of the file); O_DIRECT where asked and possible."""
        path = self.part.files[fi].path
        fd = self.fds.get(fi)
        if fd is None:
            flags = os.O_RDONLY
            if self.part.io_backend == "direct" and hasattr(os, "O_DIRECT"):
                try:
                    fd = os.open(path, flags | os.O_DIRECT)
                except OSError:  # e.g. tmpfs: no O_DIRECT, read through the page cache
                    fd = None
            self.fds[fi] = fd = fd if fd is not None else os.open(path, flags)
        try:
            return _preadv_all(fd, dest, offset, path, exact=False)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise DataSetException(f"{path}: read failed: {e}") from None
            os.close(fd)  # this file system wants another alignment: read through the page cache
            self.fds[fi] = fd = os.open(path, os.O_RDONLY)
            return _preadv_all(fd, dest, offset, path, exact=False)

    def read(self, images: np.ndarray, out: np.ndarray) -> None:
        part = self.part
        rows = out.view(np.uint8).reshape(out.shape[0], -1)
        for fi, a, b in part.segments(images):
            if fi < 0:
                out[a:b] = 0
                continue
            lf = part.files[fi]
            index = self.index.get(fi)
            if index is None:
                index = self.index[fi] = ChunkIndex.get(lf, part.store)
            offsets, sizes, skipped = index
            local = images[a:b] - lf.start
            offs, szs, skp = offsets[local], sizes[local], skipped[local]
            unwritten = offs < 0
            buf, offs = self._bytes(fi, offs, szs)
            if unwritten.any():  # chunks never written hold the fill value (0)
                out[a:b][unwritten] = 0
                keep = ~unwritten
                target = np.ascontiguousarray(rows[a:b][keep])
                status = bslz4.decode_chunks(buf, offs[keep], szs[keep], skp[keep], self.codec,
                                             part.frame_dtype.itemsize, target)
                rows[a:b][keep] = target
            else:
                status = bslz4.decode_chunks(buf, offs, szs, skp, self.codec, part.frame_dtype.itemsize, rows[a:b])
            if status < 0:
                i, what = bslz4.split_status(status)
                bad = int(local[~unwritten][i])
                raise DataSetException(f"{lf.path}:{lf.ds_path}: cannot decode the chunk of frame {bad} "
                                       f"(image {lf.start + bad + 1} of the series): {what}")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        self.maps.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class H5Reader:
    """Reads frames through h5py and HDF5's filters (``hdf5plugin``): any filter, one core a process."""

    def __init__(self, part: DectrisPartition):
        self.part = part
        self.open: dict[int, Any] = {}

    def read(self, images: np.ndarray, out: np.ndarray) -> None:
        part = self.part
        frames = out  # (images, pixels), C-contiguous
        for fi, a, b in part.segments(images):
            if fi < 0:
                frames[a:b] = 0
                continue
            lf = part.files[fi]
            ds = self.open.get(fi)
            if ds is None:
                ds = self.open[fi] = open_h5(lf.path, lf.path, part.store)[lf.ds_path]
            local = images[a:b] - lf.start
            runs = np.concatenate(([0], np.flatnonzero(np.diff(local) != 1) + 1, [len(local)]))
            for r0, r1 in zip(runs[:-1], runs[1:]):
                lo = int(local[r0])
                target = frames[a + r0:a + r1].reshape((r1 - r0,) + tuple(ds.shape[1:]))
                try:
                    ds.read_direct(target, np.s_[lo:lo + (r1 - r0)])
                except (OSError, ValueError) as e:
                    raise DataSetException(f"{lf.path}:{lf.ds_path}: cannot read frames {lo}..{lo + r1 - r0 - 1}: "
                                           f"{e}") from None

    def close(self) -> None:
        for ds in self.open.values():
            ds.file.close()
        self.open.clear()


def frame_reader(part: "DectrisPartition") -> "ChunkReader | H5Reader":
    """The reader for ``part``: its chunks decoded by raytile where the data set has a codec, else h5py."""
    return ChunkReader(part) if part.codec is not None else H5Reader(part)
