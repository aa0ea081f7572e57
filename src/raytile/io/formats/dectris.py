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
reads image ``i + sync_offset``; images outside the series read as zeros),
``decoder`` and ``io_backend`` (``"mmap"``; ``"buffered"``: one ``pread``
of the byte span of each block of chunks into a reused buffer; ``"direct"``:
the same with O_DIRECT, page-aligned, for series larger than RAM). The master's ``detectorSpecific/pixel_mask`` (non-zero:
gap, dead or hot pixel) is offered, as LiberTEM's data sets offer theirs,
by :meth:`DectrisDataSet.get_correction_data` as excluded pixels::

    ds = ctx.load("dectris", path="scan_master.h5")
    ctx.run_udf(ds, SumUDF(), corrections=ds.get_correction_data())   # pixels patched
"""

from __future__ import annotations

import errno
import math
import os
import re
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io import bslz4
from raytile.io.backends.buffered import ALIGN, _preadv_all, aligned_empty
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.fileset import check_sync_offset
from raytile.io.formats.hdf5 import h5py_with_filters

__all__ = ["DectrisDataSet", "DectrisPartition", "LinkedFile", "read_master", "HDF5_MAGIC"]

#: The first 8 bytes of an HDF5 file (at offset 0, 512, 1024, ... after a user block).
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_DETECTOR_SPECIFIC = "/entry/instrument/detector/detectorSpecific"
_LINK_NAME = re.compile(r"^data_(\d+)$")
_FILTER_BSLZ4, _FILTER_LZ4 = 32008, 32004
#: Bytes of frames decoded per call in a worker, whatever the tile size (tiles are views of them).
READ_BYTES = 4 << 20


@dataclass(frozen=True)
class LinkedFile:
    """One data set of the series: ``ds_path`` in ``path``, holding images ``start .. start + frames - 1``."""

    path: str
    ds_path: str
    start: int
    frames: int


@dataclass(frozen=True)
class MasterInfo:
    """What the master file says: data sets in image order, frame shape and dtype, detector metadata."""

    files: tuple[LinkedFile, ...]
    frame_shape: tuple[int, ...]
    dtype: np.dtype
    codec: int | None  # a bslz4 codec, or None: only HDF5's filter pipeline reads it
    filters: str
    nimages: int | None
    ntrigger: int | None
    pixel_mask: np.ndarray | None


def _scalar(group, name: str) -> int | None:
    try:
        value = group[name][()]
    except (KeyError, TypeError, ValueError, OSError):
        return None
    try:
        return int(np.asarray(value).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return None


def _codec(path: str, ds) -> tuple[int | None, str]:
    """The :mod:`~raytile.io.bslz4` codec that decodes ``ds``'s chunks, or None; and the filters by name."""
    h5py = h5py_with_filters()
    plist = ds.id.get_create_plist()
    filters = [plist.get_filter(i) for i in range(plist.get_nfilters())]
    names = ", ".join(f"{f[0]}{tuple(f[2])}" for f in filters) or "none"
    chunks = ds.chunks
    whole_frames = chunks is not None and chunks[0] == 1 and tuple(chunks[1:]) == tuple(ds.shape[1:])
    if not filters:
        layout = plist.get_layout()
        if layout == h5py.h5d.CONTIGUOUS and not plist.get_external_count():
            return bslz4.CODEC_RAW, names
        return (bslz4.CODEC_RAW if whole_frames else None), names
    if len(filters) != 1 or not whole_frames:
        return None, names
    fid, _flags, values, _name = filters[0]
    if fid == _FILTER_BSLZ4 and len(values) >= 5 and values[4] == 2:
        if len(values) > 2 and values[2] not in (0, ds.dtype.itemsize):
            raise DataSetException(f"{path}:{ds.name}: bitshuffle element size {values[2]} does not match "
                                   f"the dtype {ds.dtype}")
        return bslz4.CODEC_BSLZ4, names
    if fid == _FILTER_LZ4:
        return bslz4.CODEC_LZ4, names
    return None, names


def _linked_datasets(master: str, f) -> list[tuple[int, str, str]]:
    """``(link number, file, dataset path)`` of every ``/entry/data/data_NNNNNN``, files resolved."""
    h5py = h5py_with_filters()
    try:
        group = f["/entry/data"]
    except KeyError:
        raise DataSetException(f"{master}: not a DECTRIS master file: it has no /entry/data group") from None
    out = []
    for name in group:
        m = _LINK_NAME.match(name)
        if m is None:
            continue
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            target = link.filename
            if not os.path.isabs(target):
                target = os.path.join(os.path.dirname(os.path.abspath(master)), target)
            out.append((int(m.group(1)), target, link.path))
        else:
            out.append((int(m.group(1)), os.path.abspath(master), f"/entry/data/{name}"))
    if not out:
        raise DataSetException(f"{master}: not a DECTRIS master file: /entry/data has no data_NNNNNN links")
    return sorted(out)


def _open_h5(path: str, what: str):
    """``h5py.File(path)``, or DataSetException ``what``: cannot open as HDF5 (naming the file)."""
    h5py = h5py_with_filters()
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataSetException(f"{what}: cannot open as HDF5: {e}") from None


def read_master(path: str) -> MasterInfo:
    """Read a master file and look at every linked data set (DataSetException naming what is wrong)."""
    h5py = h5py_with_filters()
    if not os.path.isfile(path):
        raise DataSetException(f"file not found: {path}")
    with _open_h5(path, path) as f:
        links = _linked_datasets(path, f)
        spec = f.get(_DETECTOR_SPECIFIC)
        nimages = _scalar(spec, "nimages") if spec is not None else None
        ntrigger = _scalar(spec, "ntrigger") if spec is not None else None
        mask = None
        if spec is not None and "pixel_mask" in spec:
            mask = np.asarray(spec["pixel_mask"][()])
    entries = []
    first: tuple | None = None
    for number, target, ds_path in links:
        if not os.path.isfile(target):
            raise DataSetException(f"{path}: data file of link data_{number:06d} is missing: {target}")
        with _open_h5(target, f"{path}: data file {target}") as df:
            ds = df.get(ds_path)
            if not isinstance(ds, h5py.Dataset):
                raise DataSetException(f"{path}: data file {target} has no dataset {ds_path}")
            if ds.ndim != 3:
                raise DataSetException(f"{target}:{ds_path}: shape {ds.shape} is not (images, height, width)")
            codec, filters = _codec(target, ds)
            this = (tuple(ds.shape[1:]), np.dtype(ds.dtype), codec, filters)
            low = ds.attrs.get("image_nr_low")
            order = int(np.asarray(low).reshape(-1)[0]) if low is not None else None
            entries.append((order, number, target, ds_path, int(ds.shape[0])))
        if first is None:
            first = this
        elif this[:2] != first[:2]:
            raise DataSetException(f"{target}:{ds_path}: frames of {this[0]} {this[1]}, the first data file has "
                                   f"{first[0]} {first[1]}")
        elif this[2:] != first[2:]:
            first = first[:2] + (None, f"{first[3]}; {this[3]}")  # mixed filters: HDF5 reads them all
    assert first is not None
    if all(e[0] is not None for e in entries):
        entries.sort(key=lambda e: (e[0], e[1]))
    files, start = [], 0
    for _order, _number, target, ds_path, frames in entries:
        files.append(LinkedFile(target, ds_path, start, frames))
        start += frames
    frame_shape, dtype, codec, filters = first
    if dtype.kind not in "biuf":
        raise DataSetException(f"{path}: cannot read frames of dtype {dtype}")
    if mask is not None and mask.shape != frame_shape:
        warnings.warn(f"{path}: pixel_mask of shape {mask.shape} does not match frames of {frame_shape}; "
                      "not offered", stacklevel=2)
        mask = None
    return MasterInfo(tuple(files), frame_shape, dtype, codec, filters, nimages, ntrigger, mask)


class _ChunkIndex:
    """Byte offset, size and "filter skipped" of every frame's chunk, per data file and worker process."""

    _cache: "OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
    _lock = threading.Lock()
    MAX_FILES = 16

    @classmethod
    def get(cls, lf: LinkedFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        st = os.stat(lf.path)
        key = (lf.path, lf.ds_path, st.st_mtime_ns, st.st_size)
        with cls._lock:
            hit = cls._cache.get(key)
            if hit is not None:
                cls._cache.move_to_end(key)
                return hit
        index = cls._read(lf)
        with cls._lock:
            cls._cache[key] = index
            while len(cls._cache) > cls.MAX_FILES:
                cls._cache.popitem(last=False)
        return index

    @staticmethod
    def _read(lf: LinkedFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h5py = h5py_with_filters()
        with h5py.File(lf.path, "r") as f:
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


class DectrisPartition(Partition):
    """Frames of a DECTRIS series, possibly across data files, decoded in the worker that reads them."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, files: tuple[LinkedFile, ...],
                 frame_dtype: np.dtype, codec: int | None, io_backend: str):
        super().__init__(meta, partition_slice, idx)
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
                  dest_dtype: Any = None) -> Iterator[DataTile]:
        """Tiles of whole frames (every signal slice of the scheme cut from them), buffers reused."""
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
        reader = _FrameReader(self) if self.codec is not None else _H5Reader(self)
        raw: dict[int, np.ndarray] = {}
        conv: dict[tuple, np.ndarray] = {}
        whole = len(tiling_scheme.slices) == 1 and tiling_scheme.slices[0].shape.to_tuple() == sig
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
                    for s_idx, sl in enumerate(tiling_scheme.slices):
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


class _FrameReader:
    """Reads chunk bytes (file map or ``pread``) and decodes them with :func:`raytile.io.bslz4.decode_chunks`."""

    def __init__(self, part: DectrisPartition):
        assert part.codec is not None
        self.part = part
        self.codec: int = part.codec
        self.maps: dict[int, np.ndarray] = {}
        self.fds: dict[int, int] = {}
        self.index: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.scratch = np.empty(0, np.uint8)
        if part.codec != bslz4.CODEC_RAW:
            bslz4.check_decoder()

    def _bytes(self, fi: int, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes holding the chunks at ``offsets`` and their offsets in them (-1 stays -1)."""
        lf = self.part.files[fi]
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
                index = self.index[fi] = _ChunkIndex.get(lf)
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
        self.maps.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class _H5Reader:
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
                ds = self.open[fi] = _open_h5(lf.path, lf.path)[lf.ds_path]
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


class DectrisDataSet(DataSet):
    """A DECTRIS master file and its linked data files as one data set (see the module docstring)."""

    format_name = "dectris"
    initialize_on_worker = True
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
        "decoder": {"type": "choice", "choices": ["bitshuffle", "hdf5plugin"]},
        "io_backend": {"type": "choice", "choices": ["mmap", "buffered", "direct"]},
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, decoder: str | None = None, io_backend: str = "mmap", **kwargs):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._decoder = decoder
        self._io_backend = io_backend
        self._info: MasterInfo | None = None
        self._codec: int | None = None

    @classmethod
    def detect_params(cls, path: str) -> dict | None:
        """``{"path": path}`` if ``path`` is a DECTRIS master file (HDF5, /entry/data links, detector metadata)."""
        try:
            with open(path, "rb") as fh:
                head = fh.read(8)
        except OSError:
            return None
        if head != HDF5_MAGIC:
            return None
        try:
            h5py = h5py_with_filters()
            with h5py.File(path, "r") as f:
                group = f.get("/entry/data")
                if group is None or f.get(_DETECTOR_SPECIFIC) is None:
                    return None
                if not any(_LINK_NAME.match(n) for n in group):
                    return None
        except (OSError, DataSetException):
            return None
        return {"path": path}

    def _do_initialize(self) -> DataSetMeta:
        info = read_master(self._path)
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
                           raw_dtype=info.dtype.newbyteorder("="), sync_offset=self._sync_offset)

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
        reader = _FrameReader(part) if part.codec is not None else _H5Reader(part)
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
        return [DectrisPartition(self.meta, sl, idx, self._info.files, self._info.dtype, self._codec, self._io_backend)
                for idx, sl in enumerate(slices)]

    def get_partitions(self) -> list[Partition]:
        return list(self._partitions())
