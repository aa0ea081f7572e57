"""The IO backend interface and the two tile loops the backends share.

File sets of whole frames of a numpy dtype, one after another at a fixed
stride (raw files with or without frame headers and footers, npy, contiguous
HDF5) take the *frames* path: the backend hands out each nav block as frames
of the file's dtype (views of a file map or of a read buffer, strided where
frames have headers) and :meth:`IOBackend.get_frame_tiles` turns them into
tiles with numpy alone: views when the block is one run of frames
of the requested dtype, else ``np.copyto`` into a reused tile buffer (dtype
conversion, byte swap, ROI gaps, frames outside every file zero-filled).
No jitted code runs on this path, so the first read in a fresh worker does
not wait for numba: measured on the 1 GiB demo (uint16 file, float32 tiles),
compiling the read-range and decode functions took 6.3 s of the first run's
6.7 s in every worker when numba's disk cache was empty.

Every other file set takes the *read range* path: numba computes read ranges
(:mod:`raytile.io.read_ranges`) and decodes them (:mod:`raytile.io.decoders`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator

import numpy as np

from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.decoders import Decoder, decode_tile


@dataclass(frozen=True)
class FrameFile:
    """One file of a frames-path file set: global frames ``[start, stop)`` from byte ``header`` on."""

    path: str
    header: int
    start: int
    stop: int


@dataclass
class ReadJob:
    """What a backend needs to produce one partition's tiles, on either path."""

    paths: list[str]
    scheme: TilingScheme
    frames: np.ndarray          # global frame indices to read (file frame space), ascending
    nav_origin: int             # nav index (ROI-compressed) of frames[0]
    dest_dtype: np.dtype
    decoder: Decoder


@dataclass
class FramesJob(ReadJob):
    """A frames path job: where the whole frames lie in the files."""

    frame_files: list[FrameFile]
    file_dtype: np.dtype        # the dtype of the stored pixels
    frame_stride: int           # bytes from one frame to the next
    frame_header: int           # bytes before a frame's first pixel
    #: Decodes frames whose pixels numpy cannot view (raw MIB, ...): an object with ``frame_bytes``
    #: (pixel bytes per frame) and ``decode(frames, out, origin)``, ``frames`` the ``(n, frame_bytes)``
    #: uint8 bytes of a tile's frames, ``out`` the tile to fill, ``origin`` its signal slice's origin.
    frame_decoder: Any = None


@dataclass
class RangesJob(ReadJob):
    """A read range path job: ``FileSet.get_read_ranges`` of the frames."""

    tile_meta: np.ndarray
    read_ranges: np.ndarray


@dataclass
class Block:
    """One nav block's read ranges and where their bytes are.

    ``rr``: the block's read ranges (``(tiles, rr_per_tile, RR_ENTRIES)``);
    ``source(file_idx)``: the uint8 array the ranges of that file index into.
    """

    rr: np.ndarray
    source: Callable[[int], np.ndarray]


@dataclass(frozen=True)
class Segment:
    """Consecutive frames of one file inside a nav block: block frames ``[k, k + n)``
    are frames ``[first, first + n)`` of file ``file`` (counted from the file's first frame)."""

    k: int
    file: int
    first: int
    n: int


def frame_segments(job: FramesJob) -> Iterator[tuple[int, int, list[Segment]]]:
    """``(b0, count, segments)`` per nav block of ``scheme.depth`` frames of ``job.frames``.

    Frames outside every file belong to no segment (they read as zeros).
    """
    files = job.frame_files
    frames = job.frames
    depth = job.scheme.depth
    n = frames.shape[0]
    starts = np.array([f.start for f in files], dtype=np.int64)
    stops = np.array([f.stop for f in files], dtype=np.int64)
    fidx = np.searchsorted(stops, frames, side="right")
    inside = (fidx < len(files)) & (frames >= starts[np.minimum(fidx, len(files) - 1)])
    fidx[~inside] = -1
    cut = np.ones(n, dtype=bool)
    cut[1:] = (np.diff(frames) != 1) | (fidx[1:] != fidx[:-1])
    cut[::depth] = True
    seg_start = np.flatnonzero(cut).tolist()
    seg_stop = seg_start[1:] + [n]
    seg_file = fidx[seg_start].tolist()
    seg_frame = frames[seg_start].tolist()
    j = 0
    for b0 in range(0, n, depth):
        count = min(depth, n - b0)
        segments = []
        while j < len(seg_start) and seg_start[j] < b0 + count:
            f = seg_file[j]
            if f >= 0:
                segments.append(Segment(seg_start[j] - b0, f, seg_frame[j] - files[f].start,
                                        seg_stop[j] - seg_start[j]))
            j += 1
        yield b0, count, segments


def view_frames(raw: np.ndarray, job: FramesJob, n: int) -> np.ndarray:
    """``n`` frames ``(n, *sig)`` of ``job.file_dtype`` from the bytes ``raw`` (``n`` strides from a
    frame's start on): a view, strided when frames have headers or footers."""
    rows = raw[:n * job.frame_stride].reshape(n, job.frame_stride)
    if job.frame_decoder is not None:  # the decoder reads the frames' bytes
        return rows[:, job.frame_header:job.frame_header + job.frame_decoder.frame_bytes]
    sig = job.scheme.dataset_shape.sig.to_tuple()
    frame_bytes = math.prod(sig) * job.file_dtype.itemsize
    return rows[:, job.frame_header:job.frame_header + frame_bytes].view(job.file_dtype).reshape((n,) + sig)


#: A frames path nav block: ``(b0, count, parts)``, a part ``(k, frames)`` (see ``IOBackend._frame_blocks``).
FrameBlock = tuple[int, int, list[tuple[int, np.ndarray]]]


class TileSlices:
    """The :class:`Slice` of each tile of a job, with the shapes cached per (frames, scheme index)."""

    def __init__(self, job: ReadJob):
        self._nav_origin = job.nav_origin
        self._slices = job.scheme.sig_slices
        self._sig_dims = len(job.scheme.sig_shape)
        self._shapes: dict[tuple[int, int], Shape] = {}

    def __call__(self, first: int, count: int, scheme_idx: int) -> Slice:
        sig_slice = self._slices[scheme_idx]
        shape = self._shapes.get((count, scheme_idx))
        if shape is None:
            shape = self._shapes[(count, scheme_idx)] = Shape(
                (count,) + sig_slice.shape.to_tuple(), sig_dims=self._sig_dims)
        return Slice((self._nav_origin + first,) + sig_slice.origin, shape)


class IOBackend:
    """Reads a :class:`ReadJob`'s tiles. Subclasses implement :meth:`_blocks` and :meth:`_frame_blocks`.

    An instance may be passed as a format's ``io_backend=`` (as in LiberTEM); the format keeps its
    :attr:`name` and each partition makes its own. ``class X(IOBackend, id_="x")`` registers a
    subclass under an id, as LiberTEM's ``IOBackend`` does; an object of such a subclass given as
    ``io_backend=`` reads the file formats' partitions itself (HDF5 refuses it, as LiberTEM's).
    """

    name = ""
    #: LiberTEM's registry of backend classes by id (``id_=`` of a subclass).
    registry: dict[str, type["IOBackend"]] = {}
    id_: str | None = None

    def __init_subclass__(cls, id_: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if id_ is not None:
            IOBackend.registry[id_] = cls
            cls.id_ = id_

    @classmethod
    def platform_supported(cls) -> bool:
        """Whether this backend works on this platform (all of raytile's do; ``direct`` falls back)."""
        return True

    @classmethod
    def get_supported(cls) -> list[str]:
        """The ids of the registered backends that work on this platform."""
        return [k for k, v in cls.registry.items() if v.platform_supported()]

    @classmethod
    def get_cls_by_id(cls, id_: str) -> "type[IOBackend] | None":
        return cls.registry.get(id_)

    def get_tiles(self, job: RangesJob) -> Iterator[DataTile]:
        """Tiles of a read range job: read ranges decoded by numba."""
        return self._decode_tiles(job)

    def _blocks(self, job: RangesJob) -> Generator[Block, None, None]:
        """The job's nav blocks in order (every ``len(scheme)`` tiles of its read ranges make one)."""
        raise NotImplementedError(f"IO backend {type(self).__name__} does not implement _blocks (raytile's "
                                  f"IOBackend interface)")

    def _frame_blocks(self, job: FramesJob) -> Generator[FrameBlock, None, None]:
        """Frames path: ``(b0, count, parts)`` per nav block, a part being ``(k, frames)``:
        block frames ``[k, k + len(frames))`` as ``(n, *sig)`` of ``job.file_dtype``."""
        raise NotImplementedError(f"IO backend {type(self).__name__} does not implement _frame_blocks (raytile's "
                                  f"IOBackend interface)")

    def get_frame_tiles(self, job: FramesJob) -> Iterator[DataTile]:
        """Tiles of a frames job, by numpy alone."""
        scheme = job.scheme
        dest = np.dtype(job.dest_dtype)
        sig_index = [(slice(None),) + sl.get() for sl in scheme.sig_slices]
        buffers: list[np.ndarray | None] = [None] * len(scheme)
        tile_slice = TileSlices(job)
        blocks = self._frame_blocks(job)
        try:
            for b0, count, parts in blocks:
                decoder = job.frame_decoder
                whole = (decoder is None and len(parts) == 1 and parts[0][1].shape[0] == count
                         and parts[0][1].dtype == dest)
                gaps = sum(p[1].shape[0] for p in parts) < count
                for s_idx, sl in enumerate(scheme.sig_slices):
                    if whole:
                        data = parts[0][1][sig_index[s_idx]]
                    else:
                        buf = buffers[s_idx]
                        if buf is None:
                            buf = buffers[s_idx] = np.empty((scheme.depth,) + sl.shape.to_tuple(), dtype=dest)
                        data = buf[:count]
                        if gaps:
                            data[...] = 0
                        for k, frames in parts:
                            if decoder is not None:
                                decoder.decode(frames, data[k:k + frames.shape[0]], sl.origin)
                            else:
                                np.copyto(data[k:k + frames.shape[0]], frames[sig_index[s_idx]],
                                          casting="unsafe")
                    yield DataTile(data, tile_slice(b0, count, s_idx), s_idx)
        finally:
            blocks.close()

    def _decode_tiles(self, job: RangesJob) -> Iterator[DataTile]:
        meta = job.tile_meta
        scheme = job.scheme
        n_slices = len(scheme)
        decode, args = job.decoder.tile_decoder()
        clear = job.decoder.do_clear()
        slice_px = [sl.shape.size for sl in scheme.sig_slices]
        buffers = [np.zeros(scheme.depth * px, dtype=job.dest_dtype) for px in slice_px]
        tile_slice = TileSlices(job)
        blocks = self._blocks(job)
        try:
            for t0, block in zip(range(0, meta.shape[0], n_slices), blocks):
                for t in range(t0, t0 + n_slices):
                    first, count, s_idx, n_rr, fmin, fmax, blank = meta[t].tolist()
                    sl = scheme.sig_slices[s_idx]
                    out = buffers[s_idx][: count * slice_px[s_idx]]
                    if clear:
                        out[:] = 0
                    decode_tile(decode, args, block.source, block.rr[t - t0, :n_rr], fmin, fmax, bool(blank), out)
                    data = out.reshape((count,) + sl.shape.to_tuple())
                    yield DataTile(data, tile_slice(first, count, s_idx), s_idx)
        finally:
            blocks.close()

