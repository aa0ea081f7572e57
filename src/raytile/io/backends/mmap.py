"""The mmap backend: frames as views of the file map (plain file sets), or read ranges decoded from it."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import Block, IOBackend, ReadJob, frame_segments


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
    nbytes = num_frames * math.prod(sig) * dtype.itemsize
    if offset + nbytes > raw.shape[0]:
        raise DataSetException(
            f"{path}: file is too short: {num_frames} frames of {sig} {dtype} from offset {offset} "
            f"need {offset + nbytes} bytes, the file has {raw.shape[0]} (truncated?)"
        )
    return raw[offset:offset + nbytes].view(dtype).reshape((num_frames,) + tuple(sig))


class MMapBackend(IOBackend):
    name = "mmap"

    def _frame_blocks(self, job: ReadJob) -> Iterator[tuple[int, int, list[tuple[int, np.ndarray]]]]:
        sig = job.scheme.dataset_shape.sig.to_tuple()
        maps: dict[int, np.ndarray] = {}

        def frames_of(f: int) -> np.ndarray:
            m = maps.get(f)
            if m is None:
                ff = job.frame_files[f]
                m = maps[f] = map_frames(ff.path, ff.header, job.file_dtype, ff.stop - ff.start, sig)
            return m

        for b0, count, segments in frame_segments(job):
            yield b0, count, [(s.k, frames_of(s.file)[s.first:s.first + s.n]) for s in segments]

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
