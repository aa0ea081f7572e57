"""The ``hdf5`` format: one dataset inside an HDF5 file (h5py, the ``hdf5`` extra).

``ctx.load("hdf5", path="scan.h5", ds_path="/entry/data", sig_dims=2)``.
The last ``sig_dims`` axes are the signal. For chunked datasets the base
shape follows the chunking: tiles span whole chunks in the signal and a
multiple of the chunk's frames in nav, so each chunk is read (and
decompressed) once per tile block; each nav block is read with one
``read_direct`` per signal slice into a reused buffer.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator

import numpy as np

from raytile.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.shape import Shape
from raytile.io.slice import Slice
from raytile.io.tiling import DataTile, TilingScheme


def _h5py():
    try:
        import h5py
    except ImportError:
        raise DataSetException(
            "the hdf5 format needs h5py, which is not installed; pip install 'raytile[hdf5]'"
        ) from None
    return h5py


def _open(path: str, ds_path: str):
    h5py = _h5py()
    try:
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


class H5Partition(Partition):
    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, path: str, ds_path: str,
                 chunks: tuple | None, file_nav: tuple):
        super().__init__(meta, partition_slice, idx)
        self.path = path
        self.ds_path = ds_path
        self.chunks = chunks
        self.file_nav = file_nav  # nav shape as stored in the file

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {self.path}:{self.ds_path}"

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

    def _source(self):
        f, ds = _open(self.path, self.ds_path)
        with f:
            data = self._read_frames(ds, self.start, self.stop, tuple(slice(None) for _ in self.meta.shape.sig))
        return data

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
        row = nav[-1]
        pos = a
        while pos < b:
            idx = np.unravel_index(pos, nav)
            end = min(b, pos - idx[-1] + row)
            sel = tuple(int(i) for i in idx[:-1]) + (slice(int(idx[-1]), int(idx[-1]) + end - pos),) + sig_sl
            ds.read_direct(out, sel, np.s_[pos - a:end - a])
            pos = end
        return out

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None) -> Iterator[DataTile]:
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
        f, ds = _open(self.path, self.ds_path)
        with f:
            for b0 in range(0, n, depth):
                block = frames[b0:b0 + depth]
                count = len(block)
                a, z = int(block[0]), int(block[-1]) + 1
                for s_idx, sl in enumerate(tiling_scheme.slices):
                    sig_sl = sl.get()
                    key = (s_idx, z - a)
                    buf = raw.get(key)
                    if buf is None:
                        buf = raw[key] = np.empty((z - a,) + sl.shape.to_tuple(), dtype=ds.dtype)
                    self._read_frames(ds, a + offset, z + offset, sig_sl, buf)
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
    initialize_on_worker = True
    params_schema = {
        "path": {"type": "path", "required": True},
        "ds_path": {"type": "str", "required": True},
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
    }

    def __init__(self, path, ds_path: str, sig_dims: int = 2, nav_shape=None, **kwargs):
        super().__init__(**kwargs)
        self._path = os.fspath(path)
        self._ds_path = str(ds_path)
        self._sig_dims = int(sig_dims)
        self._nav_shape = None if nav_shape is None else tuple(int(v) for v in nav_shape)

    def _do_initialize(self) -> DataSetMeta:
        if not os.path.isfile(self._path):
            raise DataSetException(f"file not found: {self._path}")
        f, ds = _open(self._path, self._ds_path)
        with f:
            shape, dtype, chunks = tuple(ds.shape), np.dtype(ds.dtype), ds.chunks
            if dtype.kind not in "biuf":
                raise DataSetException(f"{self._path}:{self._ds_path}: cannot read dtype {dtype}")
        if len(shape) <= self._sig_dims:
            raise DataSetException(
                f"{self._path}:{self._ds_path}: shape {shape} has no nav axis for sig_dims={self._sig_dims}"
            )
        file_nav = shape[: len(shape) - self._sig_dims]
        sig = shape[len(shape) - self._sig_dims:]
        nav = self._nav_shape or file_nav
        if math.prod(nav) != math.prod(file_nav):
            raise DataSetException(
                f"{self._path}:{self._ds_path}: holds {math.prod(file_nav)} frames, nav_shape {nav} needs {math.prod(nav)}"
            )
        self._file_nav, self._chunks, self._h5dtype = file_nav, chunks, dtype
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=dtype.newbyteorder("="))

    def check_valid(self) -> None:
        f, ds = _open(self._path, self._ds_path)
        with f:
            try:
                ds[(0,) * ds.ndim]
            except Exception as e:
                raise DataSetException(f"{self._path}:{self._ds_path}: cannot read data: {e}") from None

    def get_cache_key(self) -> Any:
        st = os.stat(self._path)
        return ("hdf5", os.path.abspath(self._path), st.st_mtime_ns, st.st_size, self._ds_path, self.shape.to_tuple())

    def get_diagnostics(self) -> list[dict[str, Any]]:
        return super().get_diagnostics() + [
            {"name": "path", "value": f"{self._path}:{self._ds_path}"},
            {"name": "chunks", "value": str(self._chunks)},
        ]

    def get_partitions(self) -> list[Partition]:
        return [H5Partition(self.meta, sl, idx, self._path, self._ds_path, self._chunks, self._file_nav)
                for idx, sl in enumerate(self.get_slices())]
