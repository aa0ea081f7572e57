"""The ``hdf5`` format: one dataset inside an HDF5 file (h5py, the ``hdf5`` extra).

``ctx.load("hdf5", path="scan.h5", ds_path="/entry/data", sig_dims=2)``.
The last ``sig_dims`` axes are the signal. Without ``ds_path`` the largest
dataset of 3 or more dimensions is read (as LiberTEM does);
``sync_offset`` shifts the frames (nav position ``i`` reads frame
``i + sync_offset``; positions outside the dataset are left out of runs), ``sig_shape`` may be given
and must be the dataset's own (LiberTEM does not reshape HDF5 frames either). For chunked datasets the base
shape follows the chunking: tiles span whole chunks in the signal and a
multiple of the chunk's frames in nav, so each chunk is read (and
decompressed) once per tile block.

Uncompressed data (no filters, every chunk allocated, no user block) is
read without the HDF5 library: a contiguous dataset is a plain run of
frames at its offset (read "straight" from a file map), one chunked in
whole frames a :data:`~raytile.io.read_ranges.LAYOUT_CHUNKED` file set
built from the chunks' offsets; both go through :class:`~raytile.io.fileset.FilePartition`
and the IO backend ``io_backend`` (default ``"mmap"``). Other datasets are
read with one h5py ``read_direct`` per signal slice and nav block into a
reused buffer (``io_backend`` does not apply; the diagnostics say which way
a data set is read).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import DataSetException, UnsupportedIOBackend
from raytile.io.dataset import DataSet, DataSetMeta, Partition, check_array_backend
from raytile.io.decoders import NativeDecoder
from raytile.io.backends import BACKENDS
from raytile.io.fileset import REMOTE_PARAMS, File, FilePartition, FileSet, check_sync_offset
from raytile.io.store import ObjectStore, check_path_file, open_path, store_for
from raytile.io.read_ranges import LAYOUT_CHUNKED, chunked_extra
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme

__all__ = ["H5DataSet", "H5Partition", "H5FilePartition", "ChunkedFileSet", "h5py_with_filters", "nav_runs"]


def h5py_with_filters():
    """h5py, with ``hdf5plugin``'s filters registered when it is installed, so compressed data opens.

    ``hdf5plugin`` (the ``hdf5`` extra) brings bitshuffle, LZ4, Zstandard,
    Blosc, ... to HDF5: files of DECTRIS and other detectors that the plain
    HDF5 library cannot decompress.
    """
    try:
        import h5py
    except ImportError:
        raise DataSetException(
            "the hdf5 format needs h5py, which is not installed; pip install 'raytile[hdf5]'"
        ) from None
    try:
        import hdf5plugin  # noqa: F401 - registers its filters with HDF5
    except ImportError:
        pass
    return h5py


_h5py = h5py_with_filters


#: Bytes one ranged read of an HDF5 object fetches (h5py reads through a file object with this read-ahead).
H5_REMOTE_BLOCK = 4 * 1024 * 1024


def _open(path: str, ds_path: str, store: ObjectStore | None = None):
    """``(h5py file, dataset)``; a URL of ``store`` is read through a ranged file object."""
    h5py = _h5py()
    try:
        if store is not None:
            f = h5py.File(store.open(path, block_size=H5_REMOTE_BLOCK), "r")
        else:
            f = h5py.File(path, "r")
    except OSError as e:
        raise DataSetException(f"{path}: cannot open as HDF5: {e}") from None
    try:
        ds = f[ds_path]
    except KeyError:
        names: list[str] = []
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        f.close()
        raise DataSetException(f"{path}: no dataset {ds_path!r} in the file; datasets: {names[:20]}") from None
    if not isinstance(ds, h5py.Dataset):
        f.close()
        raise DataSetException(f"{path}: {ds_path!r} is a group, not a dataset")
    return f, ds


class ChunkedFileSet(FileSet):
    """One file of uncompressed chunks at the offsets HDF5 reports (two signal dims)."""

    layout = LAYOUT_CHUNKED

    def __init__(self, path: str, file_nav: tuple, chunks: tuple, sig_shape: tuple, dtype: np.dtype,
                 offsets: np.ndarray, store: ObjectStore | None = None):
        super().__init__([File(path, 0, math.prod(file_nav))], sig_shape, dtype.itemsize * 8,
                         extra=chunked_extra(file_nav, chunks, sig_shape, offsets).tolist(), store=store)
        self.split_x = 0 if tuple(chunks[-2:]) == tuple(sig_shape) else int(chunks[-1])
        self._end = int(offsets.max()) + math.prod(chunks) * dtype.itemsize

    def file_bytes(self, f: File) -> int:
        return self._end


def raw_fileset(f, ds, path: str, sig_dims: int, store: ObjectStore | None = None) -> FileSet | None:
    """A file set reading ``ds``'s bytes directly, or None when only the HDF5 library can read it."""
    h5py = _h5py()
    plist = ds.id.get_create_plist()
    dtype = np.dtype(ds.dtype)
    if plist.get_nfilters() or f.userblock_size or dtype.kind not in "biuf" or ds.size == 0:
        return None
    file_nav = tuple(ds.shape[: ds.ndim - sig_dims])
    sig = tuple(ds.shape[ds.ndim - sig_dims:])
    layout = plist.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        if plist.get_external_count():
            return None
        offset = ds.id.get_offset()
        if offset is None:
            return None
        return FileSet([File(path, 0, math.prod(file_nav), int(offset))], sig, dtype.itemsize * 8, store=store)
    chunks = tuple(int(c) for c in ds.chunks or ())
    if layout != h5py.h5d.CHUNKED or sig_dims != 2 or chunks[-2:] != sig:
        return None  # chunks that cut frames would take a read range per chunk row: h5py reads them faster
    grid = tuple(-(-n // c) for n, c in zip(ds.shape, chunks))
    offsets = np.full(grid, -1, dtype=np.int64)

    def put(info):
        offsets[tuple(o // c for o, c in zip(info.chunk_offset, chunks))] = info.byte_offset

    if hasattr(ds.id, "chunk_iter"):
        ds.id.chunk_iter(put)
    else:
        for i in range(ds.id.get_num_chunks()):
            put(ds.id.get_chunk_info(i))
    if (offsets < 0).any():
        return None  # unallocated chunks hold the fill value
    return ChunkedFileSet(path, file_nav, chunks, sig, dtype, offsets, store)


def nav_runs(a: int, b: int, nav: tuple[int, ...]) -> Iterator[tuple[int, int, tuple]]:
    """Flat frames ``[a, b)`` of a nav shape as runs along its last axis: ``(pos, end, nav index)``, the
    index a tuple of ints and one slice, so each run is one selection of the array."""
    row = nav[-1]
    pos = a
    while pos < b:
        idx = np.unravel_index(pos, nav)
        end = min(b, pos - int(idx[-1]) + row)
        sel = tuple(int(i) for i in idx[:-1]) + (slice(int(idx[-1]), int(idx[-1]) + end - pos),)
        yield pos, end, sel
        pos = end


class _ChunkTiling:
    """Base shape and tile shape veto following HDF5 chunks (``self.chunks``, ``self.file_nav``)."""

    chunks: tuple | None
    file_nav: tuple
    meta: DataSetMeta

    def _chunk_frames(self) -> int:
        """Consecutive flat frames one chunk row covers (its last nav dim's chunk length)."""
        if self.chunks is None:
            return 1
        nav_dims = len(self.file_nav)
        return int(self.chunks[nav_dims - 1])

    def get_base_shape(self, roi):
        sig_dims = self.meta.shape.sig_dims
        if self.chunks is None:
            return (1,) + (1,) * sig_dims
        return (1 if roi is not None else self._chunk_frames(),) + tuple(int(c) for c in self.chunks[-sig_dims:])

    def adjust_tileshape(self, tileshape, roi):
        base = self.get_base_shape(roi)
        sig = self.meta.shape.sig.to_tuple()
        out = [max(base[0], tileshape[0] // base[0] * base[0])]
        for t, b, s in zip(tileshape[1:], base[1:], sig):
            out.append(s if t >= s else max(b, t // b * b))
        return tuple(out)


class H5FilePartition(_ChunkTiling, FilePartition):
    """An uncompressed HDF5 dataset's frames, read by the IO backends from its byte layout."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, fileset: FileSet, dtype: np.dtype,
                 chunks: tuple | None, file_nav: tuple, io_backend: str):
        super().__init__(meta, partition_slice, idx, fileset, NativeDecoder(dtype), io_backend, dtype)
        self.chunks = chunks
        self.file_nav = file_nav


class H5Partition(_ChunkTiling, Partition):
    """A dataset's frames read through h5py (compressed or otherwise not directly readable data)."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, path: str, ds_path: str,
                 chunks: tuple | None, file_nav: tuple, store: ObjectStore | None = None):
        super().__init__(meta, partition_slice, idx)
        self.store = store
        self.path = path
        self.ds_path = ds_path
        self.chunks = chunks
        self.file_nav = file_nav  # nav shape as stored in the file

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {self.path}:{self.ds_path}"

    def _source(self):
        f, ds = _open(self.path, self.ds_path, self.store)
        with f:
            off = self.meta.sync_offset
            data = self._read_shifted(ds, self.start + off, self.stop + off,
                                      tuple(slice(None) for _ in self.meta.shape.sig))
        return data

    def _read_shifted(self, ds, a: int, b: int, sig_sl: tuple, out: np.ndarray | None = None) -> np.ndarray:
        """Flat frames ``[a, b)`` of the file; frames outside it (a ``sync_offset``) read as zeros."""
        total = math.prod(self.file_nav)
        lo, hi = min(max(a, 0), total), max(min(b, total), 0)
        if lo == a and hi == b:
            return self._read_frames(ds, a, b, sig_sl, out)
        shape = (b - a,) + tuple(s.stop - s.start if s.stop is not None else n
                                 for s, n in zip(sig_sl, self.meta.shape.sig))
        if out is None:
            out = np.empty(shape, dtype=ds.dtype)
        out[:lo - a] = 0
        out[hi - a:] = 0
        if hi > lo:
            self._read_frames(ds, lo, hi, sig_sl, out[lo - a:hi - a])
        return out

    def _read_frames(self, ds, a: int, b: int, sig_sl: tuple, out: np.ndarray | None = None) -> np.ndarray:
        """Flat frames ``[a, b)`` of the signal slice ``sig_sl``, as few reads as the nav layout allows."""
        nav = self.file_nav
        shape = (b - a,) + tuple(s.stop - s.start if s.stop is not None else n
                                 for s, n in zip(sig_sl, self.meta.shape.sig))
        if out is None:
            out = np.empty(shape, dtype=ds.dtype)
        if len(nav) == 1:
            ds.read_direct(out, np.s_[(slice(a, b),) + sig_sl])
            return out
        for pos, end, sel in nav_runs(a, b, nav):
            ds.read_direct(out, sel + sig_sl, np.s_[pos - a:end - a])
        return out

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        check_array_backend(self, array_backend)
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        offset = self.meta.sync_offset
        frames = np.arange(self.start, self.stop)
        if roi is not None:
            frames = frames[roi[self.start:self.stop]]
        n = len(frames)
        if n == 0:
            return
        nav_origin = self.roi_offset(roi)
        depth = tiling_scheme.depth
        sig_dims = self.meta.shape.sig_dims
        raw: dict = {}
        conv: dict = {}
        f, ds = _open(self.path, self.ds_path, self.store)
        with f:
            for b0 in range(0, n, depth):
                block = frames[b0:b0 + depth]
                count = len(block)
                a, z = int(block[0]), int(block[-1]) + 1
                for s_idx, sl in enumerate(tiling_scheme.sig_slices):
                    sig_sl = sl.get()
                    key = (s_idx, z - a)
                    buf = raw.get(key)
                    if buf is None:
                        buf = raw[key] = np.empty((z - a,) + sl.shape.to_tuple(), dtype=ds.dtype)
                    self._read_shifted(ds, a + offset, z + offset, sig_sl, buf)
                    data = buf if roi is None else buf[block - a]
                    if data.dtype != dest_dtype or roi is not None:
                        ckey = (s_idx, count)
                        c = conv.get(ckey)
                        if c is None:
                            c = conv[ckey] = np.empty((count,) + sl.shape.to_tuple(), dtype=dest_dtype)
                        np.copyto(c, data, casting="unsafe")
                        data = c
                    tile_slice = Slice((nav_origin + b0,) + sl.origin,
                                       Shape((count,) + sl.shape.to_tuple(), sig_dims=sig_dims))
                    yield DataTile(data, tile_slice, s_idx)


class H5DataSet(DataSet):
    """A dataset at ``ds_path`` in the HDF5 file ``path``; the last ``sig_dims`` axes are the signal."""

    format_name = "hdf5"
    file_extensions = ("h5", "hdf5", "hspy", "nxs")
    initialize_on_worker = True
    params_schema = {
        "path": {"type": "path", "required": True},
        "ds_path": {"type": "str"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
        "io_backend": {"type": "io_backend", "choices": sorted(BACKENDS)},
        "target_size": {"type": "int", "min": 1},
        "min_num_partitions": {"type": "int", "min": 1},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str, ds_path: str | None = None, sig_dims: int = 2,
                 nav_shape: tuple[int, ...] | None = None, io_backend: str = "mmap",
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int = 0,
                 storage_options: Any = None, target_size: int | None = None,
                 min_num_partitions: int | None = None, **kwargs):
        """``target_size`` (LiberTEM's name) is the bytes a partition should hold, as ``partition_bytes``;
        ``min_num_partitions`` is accepted and, as in LiberTEM, not used."""
        if target_size is not None:
            kwargs["partition_bytes"] = int(target_size)
        if not isinstance(io_backend, str):  # a user's backend object: chunks and compression need h5py's reads
            raise UnsupportedIOBackend(f"hdf5: io_backend must be one of {sorted(BACKENDS)}, got {io_backend!r}")
        super().__init__(**kwargs)
        self._store = store_for(path, storage_options)
        self._path = path
        self._ds_path = ds_path or ""
        self._sig_dims = sig_dims
        self._sig_shape = None if sig_shape is None else tuple(int(v) for v in sig_shape)
        self._sync_offset = int(sync_offset)
        self._nav_shape = nav_shape
        self._io_backend = io_backend
        self._raw_fileset: FileSet | None = None

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict | None:
        """``path``, ``ds_path``, ``nav_shape`` and ``sig_shape`` of the largest numeric dataset of 3 or more
        dimensions in an HDF5 file (or an object of ``store``); of several of the largest size, the first
        h5py visits (LiberTEM's choice). An HDF5 file without such a dataset gives its ``path`` alone, as
        LiberTEM's (loading it then asks for ``ds_path``)."""
        try:
            with open_path(path, store) as fh:
                if fh.read(8) != b"\x89HDF\r\n\x1a\n":
                    return None
        except (OSError, DataSetException):
            return None
        h5py = _h5py()
        found: list[tuple[int, str, tuple[int, ...]]] = []

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.ndim >= 3 and obj.dtype.kind in "biuf":
                found.append((int(np.prod(obj.shape)), name, tuple(obj.shape)))

        source = store.open(path, block_size=H5_REMOTE_BLOCK) if store is not None else None
        try:
            with h5py.File(source if source is not None else path, "r") as f:
                f.visititems(visit)
        except TimeoutError:  # listing the datasets took too long (a slow file system): the path only, as LiberTEM
            return {"path": path}
        except OSError as e:
            raise DataSetException(f"{path}: an HDF5 file h5py cannot open: {e}") from None
        finally:
            if source is not None:
                source.close()
        if not found:
            return {"path": path}
        largest = max(size for size, _, _ in found)
        name, shape = next((name, shape) for size, name, shape in found if size == largest)
        return {"path": path, "ds_path": name, "nav_shape": shape[:-2], "sig_shape": shape[-2:]}

    @property
    def path(self) -> str:
        """The HDF5 file's path, as LiberTEM's ``H5DataSet.path``."""
        return self._path

    @property
    def ds_path(self) -> str:
        """The HDF5 dataset read (found when none was given: after ``initialize``), as LiberTEM's
        ``H5DataSet.ds_path``."""
        return self._ds_path

    def _do_initialize(self) -> DataSetMeta:
        check_path_file(self._path, self._store)
        if not self._ds_path:  # LiberTEM's choice: the largest dataset of 3 or more dimensions
            found = self._detect_params(self._path, store=self._store)
            if found is None or "ds_path" not in found:
                raise DataSetException(f"{self._path}: not an HDF5 file, or no numeric dataset of 3 or more "
                                       "dimensions found in it (give ds_path for the dataset to read)")
            self._ds_path = found["ds_path"]
        f, ds = _open(self._path, self._ds_path, self._store)
        with f:
            shape, dtype, chunks = tuple(ds.shape), np.dtype(ds.dtype), ds.chunks
            if dtype.kind not in "biuf":
                raise DataSetException(f"{self._path}:{self._ds_path}: cannot read dtype {dtype}")
            self._raw_fileset = (raw_fileset(f, ds, self._path, self._sig_dims, self._store)
                                 if len(shape) > self._sig_dims else None)
        if len(shape) <= self._sig_dims:
            raise DataSetException(
                f"{self._path}:{self._ds_path}: shape {shape} has no nav axis for sig_dims={self._sig_dims} "
                f"({len(shape)}D HDF5 files are currently not supported, as in LiberTEM)"
            )
        file_nav = shape[: len(shape) - self._sig_dims]
        sig = shape[len(shape) - self._sig_dims:]
        if self._sig_shape is not None and self._sig_shape != tuple(sig):
            raise DataSetException(f"{self._path}:{self._ds_path}: sig_shape {self._sig_shape} is not the "
                                   f"dataset's signal shape {tuple(sig)}; HDF5 frames are not reshaped")
        nav = self._nav_shape or file_nav
        # as LiberTEM: nav_shape may hold fewer positions than the file has frames, or more (left out of runs)
        check_sync_offset(self._path, self._sync_offset, math.prod(nav), math.prod(file_nav))
        self._file_nav, self._chunks, self._h5dtype = file_nav, chunks, dtype
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=dtype.newbyteorder("="),
                           sync_offset=self._sync_offset, image_count=math.prod(file_nav))

    def check_valid(self) -> bool:
        """True if the dataset can be read (LiberTEM's answer); DataSetException naming the problem if not."""
        f, ds = _open(self._path, self._ds_path, self._store)
        with f:
            try:
                ds[(0,) * ds.ndim]
            except Exception as e:
                raise DataSetException(f"{self._path}:{self._ds_path}: cannot read data: {e}") from None
        if self._raw_fileset is not None:
            self._raw_fileset.check()
        return True

    def get_cache_key(self) -> Any:
        if self._store is not None:
            return ("hdf5", self._path, self._store.identity(self._path), self._ds_path, self.shape.to_tuple())
        st = os.stat(self._path)
        return ("hdf5", os.path.abspath(self._path), st.st_mtime_ns, st.st_size, self._ds_path, self.shape.to_tuple(),
                self._sync_offset)

    def get_diagnostics(self) -> list[dict[str, Any]]:
        return super().get_diagnostics() + [
            {"name": "path", "value": f"{self._path}:{self._ds_path}"},
            {"name": "chunks", "value": str(self._chunks)},
            {"name": "read", "value": "directly from the file" if self._raw_fileset is not None else "with h5py"},
        ] + ([{"name": "io backend", "value": self._io_backend}] if self._raw_fileset is not None else [])

    def get_partitions(self) -> list[Partition]:
        fs = self._raw_fileset
        if fs is not None:
            return [H5FilePartition(self.meta, sl, idx, fs, self._h5dtype, self._chunks, self._file_nav,
                                    self._io_backend)
                    for idx, sl in enumerate(self.get_slices())]
        return [H5Partition(self.meta, sl, idx, self._path, self._ds_path, self._chunks, self._file_nav, self._store)
                for idx, sl in enumerate(self.get_slices())]
