"""The mmap backend: frames as views of the file map (frames path), or read ranges decoded from it."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Generator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import (Block, FrameBlock, FrameFile, FramesJob, IOBackend, RangesJob, frame_segments,
                                      view_frames)


@lru_cache(maxsize=256)
def _map_file(path: str, identity: tuple[int, int, int, int]) -> np.ndarray:
    try:
        return np.memmap(path, mode="r", dtype=np.uint8)
    except (OSError, ValueError) as e:
        raise DataSetException(f"{path}: cannot memory-map the file: {e}") from None


def _map_bytes(path: str) -> np.ndarray:
    """The whole file as a read-only uint8 map, cached per process and per version of the file.

    The cache key holds the file's device, inode, size and mtime, so a file
    written again under the same path is mapped afresh, not read stale.
    """
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataSetException(f"{path}: cannot memory-map the file: {e}") from None
    return _map_file(path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def map_frames(path: str, job: FramesJob, f: FrameFile) -> np.ndarray:
    """The frames ``(f.stop - f.start, *sig)`` of file ``f``, a view of the cached byte map."""
    raw = _map_bytes(path)
    n = f.stop - f.start
    need = f.header + n * job.frame_stride
    if need > raw.shape[0]:
        raise DataSetException(
            f"{path}: file is too short: {n} frames of {job.frame_stride} bytes from offset {f.header} "
            f"need {need} bytes, the file has {raw.shape[0]} (truncated?)"
        )
    return view_frames(raw[f.header:need], job, n)


class MMapBackend(IOBackend):
    name = "mmap"

    def __init__(self, enable_readahead_hints: bool = False):
        #: LiberTEM's parameter, accepted for porting; the kernel's default readahead is used.
        self.enable_readahead_hints = bool(enable_readahead_hints)

    def _frame_blocks(self, job: FramesJob) -> Generator[FrameBlock, None, None]:
        maps: dict[int, np.ndarray] = {}

        def frames_of(f: int) -> np.ndarray:
            m = maps.get(f)
            if m is None:
                ff = job.frame_files[f]
                m = maps[f] = map_frames(ff.path, job, ff)
            return m

        for b0, count, segments in frame_segments(job):
            yield b0, count, [(s.k, frames_of(s.file)[s.first:s.first + s.n]) for s in segments]

    def _blocks(self, job: RangesJob) -> Generator[Block, None, None]:
        maps: dict[int, np.ndarray] = {}

        def source(f: int) -> np.ndarray:
            m = maps.get(f)
            if m is None:
                m = maps[f] = _map_bytes(job.paths[f])
            return m

        n_slices = len(job.scheme)
        for t0 in range(0, job.tile_meta.shape[0], n_slices):
            yield Block(job.read_ranges[t0:t0 + n_slices], source)
