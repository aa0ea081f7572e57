"""`FileSet` (one or many files of frames) and `FilePartition` (reads through an IO backend).

A file set maps a global frame index space onto files: file ``i`` holds
frames ``[start_idx, end_idx)`` after ``file_header`` bytes; each frame may
be preceded by ``frame_header_bytes`` and followed by ``frame_footer_bytes``.
:meth:`FileSet.get_read_ranges` turns frames and a tiling scheme into read
ranges (see :mod:`raytile.io.read_ranges`); formats subclass
:class:`FileSet` to change the pixel-to-byte mapping.
"""

from __future__ import annotations

import glob as _glob
import math
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends import BACKENDS, FrameFile, FramesJob, IOBackend, RangesJob, choose_backend, get_backend
from raytile.io.backends.remote import RemoteBackend
from raytile.io.dataset import DataSet, DataSetMeta, Partition, check_array_backend
from raytile.io.decoders import Decoder, NativeDecoder
from raytile.io.read_ranges import LAYOUT_FRAMES, frame_stride_bytes, get_read_ranges, slice_runs
from raytile.io.store import DEFAULT_REQUEST_BYTES, ObjectStore, expand_store_paths, store_for
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme


#: The parameter of file formats that read URLs (object stores, see :mod:`raytile.io.store`).
REMOTE_PARAMS: dict[str, Any] = {"storage_options": {"type": "storage_options"}}
#: The parameters of a format that reads frames from the file at ``path``, as LiberTEM names them: the nav and
#: sig shapes to read them in (defaults from the file) and the frames to skip at the start (``sync_offset``).
FILE_FRAME_PARAMS: dict[str, Any] = {
    "path": {"type": "path", "required": True},
    "nav_shape": {"type": "shape"},
    "sig_shape": {"type": "shape"},
    "sync_offset": {"type": "int"},
}


@dataclass(frozen=True)
class File:
    """One file of a :class:`FileSet`: global frames ``[start_idx, end_idx)`` after ``file_header`` bytes."""

    path: str
    start_idx: int
    end_idx: int
    file_header: int = 0

    @property
    def num_frames(self) -> int:
        return self.end_idx - self.start_idx


def expand_paths(path: Any, store: ObjectStore | None = None) -> list[str]:
    """A path, a glob pattern or a list of paths -> sorted/ordered list of files (must exist).

    With ``store``, the paths are URLs of that object store (see :mod:`raytile.io.store`).
    """
    if store is not None:
        return expand_store_paths(path, store)
    if isinstance(path, (list, tuple)):
        paths = [os.fspath(p) for p in path]
        if not paths:
            raise DataSetException("the list of files is empty")
    else:
        path = os.fspath(path)
        if any(c in path for c in "*?[") and not os.path.exists(path):
            paths = sorted(_glob.glob(path))
            if not paths:
                raise DataSetException(f"no files match the pattern {path}")
        else:
            paths = [path]
    for p in paths:
        if not os.path.exists(p):
            raise DataSetException(f"file not found: {p}")
        if not os.path.isfile(p):
            raise DataSetException(f"not a regular file: {p}")
    return paths


def exact_frame_stride(bpp: int, frame_px: int, frame_header_bytes: int = 0, frame_footer_bytes: int = 0) -> int:
    """Bytes one frame takes in a file, in Python integers.

    The jitted :func:`~raytile.io.read_ranges.frame_stride_bytes` computes in
    int64 and wraps around for huge frames; its pure Python body gives the
    exact size, which formats compare with :data:`~raytile.io.params.INT64_MAX`
    before any numba code sees it.
    """
    return int(frame_stride_bytes.py_func(bpp, frame_px, frame_header_bytes, frame_footer_bytes))


def check_sync_offset(path: str, sync_offset: int, nav_frames: int, file_frames: int) -> None:
    """DataSetException unless the nav axis shifted by ``sync_offset`` reads at least one frame of the file.

    Nav position ``i`` reads file frame ``i + sync_offset``; with a non-zero
    offset frames outside the file read as zeros, so without overlap a run
    would silently return zeros. (Without an offset the formats require the
    file to hold every nav position's frame.)
    """
    if sync_offset and max(sync_offset, 0) >= min(sync_offset + nav_frames, file_frames):
        # LiberTEM's words where its rule, |sync_offset| < frames in the file, says the same
        lt_rule = (f" (sync_offset should be in ({-file_frames}, {file_frames}), which is (-image_count, image_count))"
                   if abs(sync_offset) >= file_frames else "")
        raise DataSetException(
            f"{path}: sync_offset {sync_offset} reads no frame of the file: nav positions 0..{nav_frames - 1} "
            f"map to file frames {sync_offset}..{sync_offset + nav_frames - 1}, the file holds {file_frames} frames"
            f"{lt_rule}"
        )


class FileSet:
    """Files of equally sized frames, in frame order.

    ``bpp`` is bits per pixel in the file (8 x itemsize for numpy dtypes, 12
    for packed 12-bit, ...). ``layout`` is one of the file layouts of
    :mod:`~raytile.io.read_ranges`; ``split_x`` cuts read ranges at
    multiples of that width; ``extra`` holds the layout's parameters.
    """

    layout = LAYOUT_FRAMES
    split_x = 0

    def __init__(self, files: Sequence[File], sig_shape: tuple[int, ...], bpp: int,
                 frame_header_bytes: int = 0, frame_footer_bytes: int = 0, extra: Sequence[int] = (),
                 store: ObjectStore | None = None):
        self.files = list(files)
        #: The object store the files' paths are URLs of (None: local files).
        self.store = store
        self.sig_shape = tuple(int(v) for v in sig_shape)
        self.bpp = int(bpp)
        self.frame_header_bytes = int(frame_header_bytes)
        self.frame_footer_bytes = int(frame_footer_bytes)
        self.extra = np.asarray(list(extra) or [0], dtype=np.int64)
        starts = [f.start_idx for f in self.files]
        if starts != sorted(starts):
            raise DataSetException("files of a file set must be in frame order")

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def num_frames(self) -> int:
        return self.files[-1].end_idx if self.files else 0

    @property
    def frame_px(self) -> int:
        return math.prod(self.sig_shape)

    @property
    def frame_stride(self) -> int:
        return exact_frame_stride(self.bpp, self.frame_px, self.frame_header_bytes, self.frame_footer_bytes)

    def file_bytes(self, f: File) -> int:
        """Bytes ``f`` needs to hold its frames."""
        return f.file_header + f.num_frames * self.frame_stride

    def to_array(self) -> np.ndarray:
        return np.array([(f.start_idx, f.end_idx, f.file_header) for f in self.files], dtype=np.int64).reshape(-1, 3)

    @property
    def whole_frames(self) -> bool:
        """Frames of whole-byte pixels at a fixed stride (headers/footers allowed): numpy can view them."""
        return self.layout == LAYOUT_FRAMES and self.bpp % 8 == 0 and not self.split_x

    def check(self) -> None:
        """Every file exists and is long enough for its frames (DataSetException naming it otherwise)."""
        for f in self.files:
            if self.store is not None:
                size = self.store.size(f.path)
            else:
                try:
                    size = os.path.getsize(f.path)
                except OSError as e:
                    raise DataSetException(f"{f.path}: cannot stat: {e}") from None
            need = self.file_bytes(f)
            if size < need:
                raise DataSetException(
                    f"{f.path}: file is too short: {f.num_frames} frames of {self.sig_shape} at {self.bpp} bits "
                    f"per pixel (+{self.frame_header_bytes}/{self.frame_footer_bytes} header/footer bytes per "
                    f"frame, {f.file_header} bytes file header) need {need} bytes, the file has {size} (truncated?)"
                )

    def get_read_ranges(self, frames: np.ndarray, scheme: TilingScheme):
        """``(tile_meta, read_ranges)`` for reading ``frames`` (global indices) by ``scheme``."""
        runs, n_runs, slice_px = slice_runs(scheme.sig_slices, self.sig_shape, self.split_x)
        rr_per_tile = max(1, int(scheme.depth * n_runs.max()))
        return get_read_ranges(
            np.ascontiguousarray(frames, dtype=np.int64), int(scheme.depth), runs, n_runs, slice_px,
            self.frame_px, self.to_array(), self.bpp, self.frame_header_bytes, self.frame_footer_bytes,
            self.layout, self.extra, rr_per_tile,
        )

    def cache_key(self) -> tuple:
        parts: list[tuple] = []
        for f in self.files:
            if self.store is not None:
                parts.append((f.path, self.store.identity(f.path), f.start_idx, f.end_idx, f.file_header))
                continue
            st = os.stat(f.path)
            parts.append((os.path.abspath(f.path), st.st_mtime_ns, st.st_size, f.start_idx, f.end_idx,
                          f.file_header))
        return (tuple(parts), self.sig_shape, self.bpp, self.frame_header_bytes, self.frame_footer_bytes,
                tuple(self.extra.tolist()), type(self).__name__)


class FilePartition(Partition):
    """Frames of a :class:`FileSet`, read through an IO backend and a :class:`Decoder`."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, fileset: FileSet,
                 decoder: Decoder, io_backend: "str | IOBackend" = "mmap", native_dtype: Any = None):
        super().__init__(meta, partition_slice, idx)
        self.fileset = fileset
        self.decoder = decoder
        self.io_backend = io_backend
        self.native_dtype = np.dtype(native_dtype if native_dtype is not None else meta.raw_dtype)

    def describe(self) -> str:
        paths = self.fileset.paths
        where = paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]} ...)"
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {where}"

    def get_io_size(self) -> int | None:
        """Bytes of one ranged GET from an object store (tiles of about that size); None for local files."""
        return DEFAULT_REQUEST_BYTES if self.fileset.store is not None else None

    def backend(self) -> IOBackend:
        """The IO backend reading this partition: ranged GETs for an object store, else ``io_backend``."""
        store = self.fileset.store
        if store is not None:
            return RemoteBackend(store, self.get_io_size())
        return get_backend(self.io_backend)

    def _frames(self, roi: np.ndarray | None) -> np.ndarray:
        frames = np.arange(self.start, self.stop, dtype=np.int64)
        if roi is not None:
            frames = frames[roi[self.start:self.stop]]
        return frames + self.meta.sync_offset

    def _source(self):
        scheme = TilingScheme.make_for_shape(
            Shape((max(1, self.shape[0]),) + self.meta.shape.sig.to_tuple(), sig_dims=self.meta.shape.sig_dims),
            self.meta.shape,
        )
        tiles = list(self.get_tiles(scheme))
        return np.concatenate([np.array(t.data) for t in tiles]) if tiles else np.zeros(
            (0,) + self.meta.shape.sig.to_tuple(), dtype=self.meta.raw_dtype)

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        """Yield tiles in nav order, every signal slice per nav block (buffers are reused), read with
        the partition's ``io_backend``."""
        check_array_backend(self, array_backend)
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        frames = self._frames(roi)
        if frames.shape[0] == 0:
            return
        fs = self.fileset
        backend = self.backend()
        common = dict(paths=fs.paths, scheme=tiling_scheme, frames=frames, nav_origin=self.roi_offset(roi),
                      dest_dtype=dest_dtype, decoder=self.decoder)
        file_dtype = self.decoder.file_dtype()
        if fs.whole_frames and file_dtype is not None:  # numpy alone, no jitted code
            files = [FrameFile(f.path, f.file_header, f.start_idx, f.end_idx) for f in fs.files]
            yield from backend.get_frame_tiles(FramesJob(**common, frame_files=files, file_dtype=file_dtype,
                                                         frame_stride=fs.frame_stride,
                                                         frame_header=fs.frame_header_bytes))
            return
        tile_meta, read_ranges = fs.get_read_ranges(frames, tiling_scheme)
        yield from backend.get_tiles(RangesJob(**common, tile_meta=tile_meta, read_ranges=read_ranges))


class FileDataSet(DataSet):
    """Base of file formats read through a :class:`FileSet`: backend choice, checks, cache key.

    Subclasses implement :meth:`_do_initialize` setting ``self._fileset``,
    ``self._decoder`` and ``self._native_dtype`` and returning the meta.
    """

    initialize_on_worker = True
    partition_class = FilePartition
    params_schema = {"io_backend": {"type": "io_backend", "choices": sorted(BACKENDS)}}

    def __init__(self, io_backend: "str | IOBackend | None" = None, storage_options: Any = None, **kwargs):
        super().__init__(**kwargs)
        self._io_backend_requested = io_backend
        self._storage_options = storage_options
        self._fileset: FileSet | None = None
        self._decoder: Decoder | None = None
        self._native_dtype: np.dtype | None = None

    @property
    def fileset(self) -> FileSet:
        if self._fileset is None:
            raise DataSetException(f"{type(self).__name__} is not initialized; load it with Context.load")
        return self._fileset

    def store_of(self, path: Any) -> ObjectStore | None:
        """The object store of ``path`` (a URL, with the data set's ``storage_options``), or None for local
        files; formats that read URLs call it in :meth:`_do_initialize` and pass it to their FileSet."""
        store = store_for(path, self._storage_options)
        if store is not None and self._io_backend_requested not in (None, "remote"):
            raise DataSetException(f"{self.format_name}: io_backend {self._io_backend_requested!r} reads local "
                                   f"files; {store.protocol}:// URLs are read by ranged requests (leave io_backend "
                                   f"unset)")
        return store

    @property
    def io_backend(self) -> "str | IOBackend":
        if self.fileset.store is not None:
            return "remote"
        nbytes = sum(self.fileset.file_bytes(f) for f in self.fileset.files)
        return choose_backend(nbytes, self._io_backend_requested)

    @property
    def decoder(self) -> Decoder:
        return self._decoder or NativeDecoder(self.dtype)

    def check_valid(self) -> None:
        self.fileset.check()

    def get_cache_key(self) -> Any:
        return (self.format_name, self.fileset.cache_key(), self.shape.to_tuple(), str(self.dtype),
                self.meta.sync_offset, self.decoder.describe())

    def get_diagnostics(self) -> list[dict[str, Any]]:
        diag = super().get_diagnostics()
        fs = self.fileset
        diag += [
            {"name": "files", "value": str(len(fs.files))},
            {"name": "first file", "value": fs.paths[0]},
            {"name": "frames in files", "value": str(fs.num_frames)},
            {"name": "bits per pixel", "value": str(fs.bpp)},
            {"name": "frame header/footer bytes", "value": f"{fs.frame_header_bytes}/{fs.frame_footer_bytes}"},
            {"name": "io backend", "value": self.io_backend},
            {"name": "decoder", "value": self.decoder.describe()},
        ]
        return diag

    def _make_partition(self, sl: Slice, idx: int) -> Partition:
        return self.partition_class(self.meta, sl, idx, self.fileset, self.decoder, self.io_backend,
                                    self._native_dtype)

    def get_partitions(self) -> list[Partition]:
        return [self._make_partition(sl, idx) for idx, sl in enumerate(self.get_slices())]
