"""The mmap backend: straight views of the map, or read ranges decoded from it."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import Block, IOBackend, ReadJob, TileSlices
from raytile.common.tiling import DataTile


@lru_cache(maxsize=256)
def _map_bytes(path: str) -> np.ndarray:
    """The whole file as a read-only uint8 map, cached per process."""
    try:
        return np.memmap(path, mode="r", dtype=np.uint8)
    except (OSError, ValueError) as e:
        raise DataSetException(f"{path}: cannot memory-map the file: {e}") from None


def map_frames(path: str, offset: int, dtype: np.dtype, num_frames: int, sig: tuple) -> np.ndarray:
    """Frames ``(num_frames, *sig)`` of ``dtype`` from ``offset`` on, a view of the cached byte map."""
    raw = _map_bytes(path)
    nbytes = num_frames * int(np.prod(sig)) * dtype.itemsize
    if offset + nbytes > raw.shape[0]:
        raise DataSetException(
            f"{path}: file is too short: {num_frames} frames of {sig} {dtype} from offset {offset} "
            f"need {offset + nbytes} bytes, the file has {raw.shape[0]} (truncated?)"
        )
    return raw[offset:offset + nbytes].view(dtype).reshape((num_frames,) + tuple(sig))


class MMapBackend(IOBackend):
    name = "mmap"
    supports_straight = True

    def get_tiles_straight(self, job: ReadJob) -> Iterator[DataTile]:
        scheme = job.scheme
        sig = scheme.dataset_shape.sig.to_tuple()
        dtype = job.native_dtype
        maps = []
        for path, header, start, stop in job.straight_files:
            maps.append((start, stop, map_frames(path, header, dtype, stop - start, sig)))
        frames = job.frames
        n = frames.shape[0]
        first_frame = int(frames[0]) if n else 0
        buffer = None
        tile_slice = TileSlices(job)
        for b0 in range(0, n, scheme.depth):
            count = min(scheme.depth, n - b0)
            a, z = first_frame + b0, first_frame + b0 + count
            block = None
            for start, stop, mm in maps:
                if start <= a and z <= stop:
                    block = mm[a - start:z - start]
                    break
            if block is None:  # the block spans files: gather it
                if buffer is None:
                    buffer = np.empty((scheme.depth,) + sig, dtype=dtype)
                block = buffer[:count]
                for start, stop, mm in maps:
                    lo, hi = max(a, start), min(z, stop)
                    if hi > lo:
                        block[lo - a:hi - a] = mm[lo - start:hi - start]
            for s_idx, sl in enumerate(scheme.slices):
                data = block[(slice(None),) + sl.get()]
                yield DataTile(data, tile_slice(b0, count, s_idx), s_idx)

    def _blocks(self, job: ReadJob) -> Iterator[Block]:
        maps: dict[int, np.ndarray] = {}

        def source(f: int) -> np.ndarray:
            m = maps.get(f)
            if m is None:
                m = maps[f] = _map_bytes(job.paths[f])
            return m

        n_slices = len(job.scheme)
        for t0 in range(0, job.tile_meta.shape[0], n_slices):
            yield Block(job.read_ranges[t0:t0 + n_slices], source)
