"""The IO backend interface and the decode loop the backends share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from raytile.io.decoders import Decoder, decode_tile
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme


@dataclass
class ReadJob:
    """Everything a backend needs to produce one partition's tiles."""

    paths: list[str]
    scheme: TilingScheme
    frames: np.ndarray          # global frame indices to read (file frame space)
    nav_origin: int             # nav index (ROI-compressed) of frames[0]
    dest_dtype: np.dtype
    decoder: Decoder
    tile_meta: np.ndarray | None = None   # from FileSet.get_read_ranges
    read_ranges: np.ndarray | None = None
    # for straight reads: (path, file_header, first_frame, stop_frame) per file, native dtype
    straight_files: Any = None
    native_dtype: np.dtype | None = None
    #: The file's bytes are the tile's pixels (plain files, identity decoder, consecutive frames):
    #: a backend may hand out views of what it read instead of decoding.
    plain: bool = False


@dataclass
class Block:
    """One nav block's read ranges and where their bytes are.

    ``rr``: the block's read ranges (``(tiles, rr_per_tile, RR_ENTRIES)``);
    ``source(file_idx)``: the uint8 array the ranges of that file index into;
    ``frames``: with a plain job, the block's frames as a ``(count, *sig)``
    array when the backend holds them contiguously (tiles are then views of
    it, not decoded), else None.
    """

    rr: np.ndarray
    source: Callable[[int], np.ndarray]
    frames: np.ndarray | None = None


class TileSlices:
    """The :class:`Slice` of each tile of a job, with the shapes cached per (frames, scheme index)."""

    def __init__(self, job: ReadJob):
        self._nav_origin = job.nav_origin
        self._slices = job.scheme.slices
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
    """Reads a :class:`ReadJob`'s tiles. Subclasses implement :meth:`_blocks`."""

    name = ""
    supports_straight = False

    def get_tiles(self, job: ReadJob) -> Iterator[DataTile]:
        return self._decode_tiles(job)

    def get_tiles_straight(self, job: ReadJob) -> Iterator[DataTile]:
        raise NotImplementedError

    def _blocks(self, job: ReadJob) -> Iterator[Block]:
        """The job's nav blocks in order (every ``len(scheme)`` tiles of its read ranges make one)."""
        raise NotImplementedError

    def _decode_tiles(self, job: ReadJob) -> Iterator[DataTile]:
        meta = job.tile_meta
        scheme = job.scheme
        n_slices = len(scheme)
        kind, bits, value_dtype = job.decoder.decode_params()
        proto = np.empty(0, dtype=value_dtype)
        clear = job.decoder.do_clear()
        slice_px = [sl.shape.size for sl in scheme.slices]
        sig_index = [(slice(None),) + sl.get() for sl in scheme.slices]
        buffers = [np.zeros(scheme.depth * px, dtype=job.dest_dtype) for px in slice_px]
        tile_slice = TileSlices(job)
        blocks = self._blocks(job)
        try:
            for t0, block in zip(range(0, meta.shape[0], n_slices), blocks):
                for t in range(t0, t0 + n_slices):
                    first, count, s_idx, n_rr, fmin, fmax, blank = meta[t].tolist()
                    sl = scheme.slices[s_idx]
                    if block.frames is not None:
                        data = block.frames[sig_index[s_idx]]
                    else:
                        out = buffers[s_idx][: count * slice_px[s_idx]]
                        if clear:
                            out[:] = 0
                        tile_rr = block.rr[t - t0]
                        for f in range(fmin, fmax + 1):
                            decode_tile(block.source(f), tile_rr, n_rr, f, out, kind, bits, proto)
                        if blank:
                            decode_tile(_EMPTY, tile_rr, n_rr, -1, out, kind, bits, proto)
                        data = out.reshape((count,) + sl.shape.to_tuple())
                    yield DataTile(data, tile_slice(first, count, s_idx), s_idx)
        finally:
            blocks.close()


_EMPTY = np.zeros(1, dtype=np.uint8)
