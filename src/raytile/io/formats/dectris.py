"""The ``dectris`` format: a DECTRIS ``*_master.h5`` and its linked data files, read as one data set.

``ctx.load("dectris", path="scan_master.h5", nav_shape=(1024, 1024))``.
A DECTRIS detector (EIGER, ARINA, QUADRO) writes a NeXus master file whose
``/entry/data/data_000001``, ``data_000002``, ... are HDF5 external links to
data files (``scan_data_000001.h5:/entry/data/data``) of a few thousand
frames each (an ARINA 1024x1024 scan: 105 files of (10000, 96, 96)
uint16). raytile reads them as one data set, frames in image order (the
data sets' ``image_nr_low`` attributes, else the link numbers), and a
partition may span several files.

Frames are stored as chunks of one frame, compressed with bitshuffle-LZ4
(HDF5 filter 32008), LZ4 (32004) or not at all. The workers read the
stored chunk bytes from a file map at the offsets HDF5 reports (listed
once per file and worker, ``chunk_iter``) and decode a tile of chunks per
call (:func:`raytile.io.bslz4.decode_chunks`), in parallel over the
workers; ``decoder="hdf5plugin"`` (the default for any other filter, for
chunks of several frames or when the ``bitshuffle`` package is missing)
reads through h5py with ``hdf5plugin``'s filters instead.

Parameters (LiberTEM's names where it has them): ``path``, ``nav_shape``
(default: ``(ntrigger, nimages)`` from ``detectorSpecific`` when both are
above 1 and match the frame count, else all frames in one axis),
``sig_shape`` (a reshape of the frame), ``sync_offset`` (nav position ``i``
reads image ``i + sync_offset``; positions outside the series have no frame and are left out of runs),
``decoder`` and ``io_backend`` (``"mmap"``; ``"buffered"``: one ``pread``
of the byte span of each block of chunks into a reused buffer; ``"direct"``:
the same with O_DIRECT, page-aligned, for series larger than RAM). The master's ``detectorSpecific/pixel_mask`` (non-zero:
gap, dead or hot pixel) is offered, as LiberTEM's data sets offer theirs,
by :meth:`DectrisDataSet.get_correction_data` as excluded pixels::

    ds = ctx.load("dectris", path="scan_master.h5")
    ctx.run_udf(ds, SumUDF(), corrections=ds.get_correction_data())   # pixels patched
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io import bslz4
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, DataSetMeta, Partition, check_array_backend
from raytile.io.fileset import REMOTE_PARAMS, check_sync_offset
from raytile.io.store import ObjectStore, store_for
from raytile.io.formats.dectris_master import LinkedFile, MasterInfo, is_master, read_master
from raytile.io.formats.dectris_readers import frame_reader

__all__ = ["DectrisDataSet", "DectrisPartition"]

#: Bytes of frames decoded per call in a worker, whatever the tile size (tiles are views of them).
READ_BYTES = 4 << 20


class DectrisPartition(Partition):
    """Frames of a DECTRIS series, possibly across data files, decoded in the worker that reads them."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, files: tuple[LinkedFile, ...],
                 frame_dtype: np.dtype, codec: int | None, io_backend: str, store: ObjectStore | None = None):
        super().__init__(meta, partition_slice, idx)
        #: The object store the files are URLs of (None: local files).
        self.store = store
        self.files = files
        self.frame_dtype = frame_dtype
        self.codec = codec
        self.io_backend = io_backend
        self._starts = np.array([lf.start for lf in files] + [files[-1].start + files[-1].frames], dtype=np.int64)

    def describe(self) -> str:
        first, last = self._file_range()
        where = self.files[first].path if first == last else f"{self.files[first].path} .. {self.files[last].path}"
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {where}"

    def _file_range(self) -> tuple[int, int]:
        total = int(self._starts[-1])
        a = min(max(self.start + self.meta.sync_offset, 0), total - 1)
        b = min(max(self.stop - 1 + self.meta.sync_offset, 0), total - 1)
        return (int(np.searchsorted(self._starts, a, "right") - 1), int(np.searchsorted(self._starts, b, "right") - 1))

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        return (1,) + self.meta.shape.sig.to_tuple()  # a chunk is a whole frame

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        return (max(1, int(tileshape[0])),) + self.meta.shape.sig.to_tuple()

    def _source(self) -> Any:
        scheme = TilingScheme.make_for_shape(
            Shape((max(1, self.shape[0]),) + self.meta.shape.sig.to_tuple(), sig_dims=self.meta.shape.sig_dims),
            self.meta.shape)
        tiles = [np.array(t.data) for t in self.get_tiles(scheme)]
        return np.concatenate(tiles) if tiles else np.zeros((0,) + self.meta.shape.sig.to_tuple(), self.meta.raw_dtype)

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        """Tiles of whole frames (every signal slice of the scheme cut from them), buffers reused."""
        check_array_backend(self, array_backend)
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        nav = np.arange(self.start, self.stop, dtype=np.int64)
        if roi is not None:
            nav = nav[roi[self.start:self.stop]]
        if nav.shape[0] == 0:
            return
        images = nav + self.meta.sync_offset
        nav_origin = self.roi_offset(roi)
        sig = self.meta.shape.sig.to_tuple()
        sig_dims = len(sig)
        depth = tiling_scheme.depth
        # Decode READ_BYTES of frames per call (tiles of small frames are small: 32 ARINA frames are 590 kB),
        # a whole number of tiles, and yield the tiles as views of it.
        frame_bytes = math.prod(sig) * self.frame_dtype.itemsize
        per_read = depth * max(1, READ_BYTES // max(1, depth * frame_bytes))
        reader = frame_reader(self)
        raw: dict[int, np.ndarray] = {}
        conv: dict[tuple, np.ndarray] = {}
        whole = len(tiling_scheme.sig_slices) == 1 and tiling_scheme.sig_slices[0].shape.to_tuple() == sig
        try:
            for r0 in range(0, len(images), per_read):
                block = images[r0:r0 + per_read]
                buf = raw.get(len(block))
                if buf is None:
                    raw.clear()
                    buf = raw[len(block)] = np.empty((len(block),) + sig, dtype=self.frame_dtype)
                reader.read(block, buf.reshape(len(block), -1))
                for t0 in range(0, len(block), depth):
                    tile = buf[t0:t0 + depth]
                    count = tile.shape[0]
                    for s_idx, sl in enumerate(tiling_scheme.sig_slices):
                        data = tile if whole else tile[(slice(None),) + sl.get()]
                        if data.dtype != dest_dtype or not whole:
                            key = (s_idx, count)
                            c = conv.get(key)
                            if c is None:
                                c = conv[key] = np.empty((count,) + sl.shape.to_tuple(), dtype=dest_dtype)
                            np.copyto(c, data, casting="unsafe")
                            data = c
                        tile_slice = Slice((nav_origin + r0 + t0,) + sl.origin,
                                           Shape((count,) + sl.shape.to_tuple(), sig_dims=sig_dims))
                        yield DataTile(data, tile_slice, s_idx)
        finally:
            reader.close()

    def segments(self, images: np.ndarray) -> Iterator[tuple[int, int, int]]:
        """``(file index, first row, end row)`` runs of ``images`` (sorted) in one data file; -1: outside."""
        idx = np.searchsorted(self._starts, images, "right") - 1
        idx[(images < 0) | (images >= self._starts[-1])] = -1
        cuts = np.flatnonzero(np.diff(idx)) + 1
        bounds = np.concatenate(([0], cuts, [len(images)]))
        for a, b in zip(bounds[:-1], bounds[1:]):
            yield int(idx[a]), int(a), int(b)


class DectrisDataSet(DataSet):
    """A DECTRIS master file and its linked data files as one data set (see the module docstring)."""

    format_name = "dectris"
    file_extensions = ("h5",)
    initialize_on_worker = True
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
        "decoder": {"type": "choice", "choices": ["bitshuffle", "hdf5plugin"]},
        "io_backend": {"type": "io_backend", "choices": ["mmap", "buffered", "direct"]},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, decoder: str | None = None, io_backend: str = "mmap",
                 storage_options: Any = None, **kwargs):
        super().__init__(**kwargs)
        self._store = store_for(path, storage_options)
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._decoder = decoder
        self._io_backend = io_backend
        self._info: MasterInfo | None = None
        self._codec: int | None = None

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict | None:
        """``{"path": path}`` if ``path`` (a file, or an object of ``store``) is a DECTRIS master file (HDF5,
        /entry/data links, detector metadata)."""
        return {"path": path} if is_master(path, store) else None

    def _do_initialize(self) -> DataSetMeta:
        info = read_master(self._path, self._store)
        self._info = info
        total = sum(lf.frames for lf in info.files)
        if total == 0:
            raise DataSetException(f"{self._path}: the series holds no images")
        if self._decoder == "bitshuffle" and info.codec is None:
            raise DataSetException(f"{self._path}: decoder='bitshuffle' cannot read chunks filtered by "
                                   f"{info.filters} (or chunks of more than one frame); use decoder='hdf5plugin'")
        use_ours = self._decoder != "hdf5plugin" and info.codec is not None and (
            info.codec == bslz4.CODEC_RAW or bslz4.have_decoder())
        if self._decoder == "bitshuffle" and not use_ours:
            bslz4.check_decoder()
        self._codec = info.codec if use_ours else None
        sig = self._sig_shape or info.frame_shape
        if math.prod(sig) != math.prod(info.frame_shape):
            raise DataSetException(f"{self._path}: sig_shape {sig} does not hold frames of {info.frame_shape}")
        nav = self._nav_shape or self._default_nav(info, total)
        check_sync_offset(self._path, self._sync_offset, math.prod(nav), total)
        if self._sync_offset == 0 and math.prod(nav) > total:
            raise DataSetException(f"{self._path}: the series holds {total} images, nav_shape {nav} needs "
                                   f"{math.prod(nav)}; the shape is wrong or data files are missing")
        if self._sync_offset == 0 and math.prod(nav) < total:
            warnings.warn(f"{self._path} holds {total} images, nav_shape {nav} reads only the first "
                          f"{math.prod(nav)}", stacklevel=2)
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)),
                           raw_dtype=info.dtype.newbyteorder("="), sync_offset=self._sync_offset, image_count=total)

    @staticmethod
    def _default_nav(info: MasterInfo, total: int) -> tuple[int, ...]:
        if info.ntrigger and info.nimages and info.ntrigger > 1 and info.nimages > 1 \
                and info.ntrigger * info.nimages == total:
            return (info.ntrigger, info.nimages)
        return (total,)

    def check_valid(self) -> None:
        """Decode the first image, so that a file we cannot read fails at load, not in a task."""
        part = self._partitions(1)[0]
        frame = np.empty((1,) + self.shape.sig.to_tuple(), dtype=self._frame_dtype())
        first = np.array([0], dtype=np.int64)
        reader = frame_reader(part)
        try:
            reader.read(first, frame.reshape(1, -1))
        finally:
            reader.close()

    def _frame_dtype(self) -> np.dtype:
        assert self._info is not None
        return self._info.dtype

    @property
    def pixel_mask(self) -> np.ndarray | None:
        """The master's ``pixel_mask`` (non-zero: excluded), shaped like the signal, or None."""
        assert self._info is not None
        mask = self._info.pixel_mask
        return None if mask is None else mask.reshape(self.shape.sig.to_tuple())

    def get_correction_data(self) -> CorrectionSet:
        """The pixel mask as excluded pixels (LiberTEM's ``DataSet.get_correction_data``); empty without one.

        Pixels whose neighbours are all excluded keep their value (``allow_empty=True``): module gaps
        have no good neighbour to be patched from.
        """
        mask = self.pixel_mask
        if mask is None or not mask.any():
            return CorrectionSet()
        return CorrectionSet(excluded_pixels=mask != 0, allow_empty=True)

    def get_cache_key(self) -> Any:
        assert self._info is not None
        if self._store is not None:
            ids = tuple((lf.path, self._store.identity(lf.path)) for lf in self._info.files)
            return ("dectris", self._path, ids, self.shape.to_tuple(), self._sync_offset)
        stats = tuple((lf.path, os.stat(lf.path).st_mtime_ns) for lf in self._info.files)
        return ("dectris", os.path.abspath(self._path), stats, self.shape.to_tuple(), self._sync_offset)

    def get_diagnostics(self) -> list[dict[str, Any]]:
        assert self._info is not None
        info = self._info
        how = "h5py + hdf5plugin" if self._codec is None else (
            "chunks copied in the workers" if self._codec == bslz4.CODEC_RAW else "chunks decoded in the workers")
        return super().get_diagnostics() + [
            {"name": "master", "value": self._path},
            {"name": "data files", "value": str(len(info.files))},
            {"name": "filters", "value": info.filters},
            {"name": "read", "value": how},
            {"name": "nimages x ntrigger", "value": f"{info.nimages} x {info.ntrigger}"},
            {"name": "excluded pixels", "value": str(0 if info.pixel_mask is None else int((info.pixel_mask != 0).sum()))},
        ]

    def _partitions(self, n: int | None = None) -> list[DectrisPartition]:
        assert self._info is not None
        slices = self.get_slices() if n is None else self.get_slices()[:n]
        return [DectrisPartition(self.meta, sl, idx, self._info.files, self._info.dtype, self._codec, self._io_backend,
                                 self._store)
                for idx, sl in enumerate(slices)]

    def get_partitions(self) -> list[Partition]:
        return list(self._partitions())
