"""The IO backend interface and the decode loop the backends share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from raytile.io.decoders import Decoder, make_decode_tile
from raytile.io.read_ranges import RR_FILE
from raytile.io.shape import Shape
from raytile.io.slice import Slice
from raytile.io.tiling import DataTile, TilingScheme


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


def tile_slice_for(job: ReadJob, first: int, count: int, scheme_idx: int) -> Slice:
    sig_slice = job.scheme.slices[scheme_idx]
    return Slice((job.nav_origin + first,) + sig_slice.origin,
                 Shape((count,) + sig_slice.shape.to_tuple(), sig_dims=len(sig_slice.origin)))


class IOBackend:
    """Reads a :class:`ReadJob`'s tiles. Subclasses implement :meth:`_block_source`."""

    name = ""
    supports_straight = False

    def get_tiles(self, job: ReadJob) -> Iterator[DataTile]:
        return self._decode_tiles(job)

    def get_tiles_straight(self, job: ReadJob) -> Iterator[DataTile]:
        raise NotImplementedError

    def _open(self, job: ReadJob) -> None:
        """Per-job setup (open files)."""

    def _close(self) -> None:
        """Per-job teardown."""

    def _block_source(self, job: ReadJob, t0: int, t1: int):
        """Prepare tiles ``[t0, t1)`` (one nav block); return ``(rr, {file_idx: (inp, base)})``."""
        raise NotImplementedError

    def _decode_tiles(self, job: ReadJob) -> Iterator[DataTile]:
        meta, rr = job.tile_meta, job.read_ranges
        scheme = job.scheme
        n_slices = len(scheme)
        decode = make_decode_tile(job.decoder.get_decode(job.native_dtype, job.dest_dtype))
        clear = job.decoder.do_clear()
        depth = scheme.depth
        buffers = [np.zeros(depth * sl.shape.size, dtype=job.dest_dtype) for sl in scheme.slices]
        self._open(job)
        try:
            for t0 in range(0, meta.shape[0], n_slices):
                t1 = t0 + n_slices
                block_rr, sources = self._block_source(job, t0, t1)
                for t in range(t0, t1):
                    first, count, s_idx, n_rr = (int(v) for v in meta[t])
                    sl = scheme.slices[s_idx]
                    out = buffers[s_idx][: count * sl.shape.size]
                    if clear:
                        out[:] = 0
                    tile_rr = block_rr[t - t0]
                    files = np.unique(tile_rr[:n_rr, RR_FILE])
                    for f in files:
                        inp, base = sources[int(f)] if f >= 0 else (_EMPTY, 0)
                        decode(inp, base, tile_rr, n_rr, int(f), out)
                    data = out.reshape((count,) + sl.shape.to_tuple())
                    yield DataTile(data, tile_slice_for(job, first, count, s_idx), s_idx)
        finally:
            self._close()


_EMPTY = np.zeros(1, dtype=np.uint8)
