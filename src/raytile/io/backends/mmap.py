"""The mmap backend: frames as views of the file map (frames path), or read ranges decoded from it.

Each file is read under a read lease while a partition maps it (see
:mod:`raytile.io.backends.lease`): a file truncated during a run ends the
read with a DataSetException naming it, where it used to end the process
with SIGBUS.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Generator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import (Block, FrameBlock, FrameFile, FramesJob, IOBackend, RangesJob, Segment,
                                      frame_segments, view_frames)
from raytile.io.backends.buffered import BufferedBackend, _preadv_all
from raytile.io.backends.lease import ReadLeases, unleased_policy


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
    need = _frames_bytes(job, f)
    if need > raw.shape[0]:
        raise DataSetException(
            f"{path}: file is too short: {n} frames of {job.frame_stride} bytes from offset {f.header} "
            f"need {need} bytes, the file has {raw.shape[0]} (truncated?)"
        )
    return view_frames(raw[f.header:need], job, n)


def _frames_bytes(job: FramesJob, f: FrameFile) -> int:
    return f.header + (f.stop - f.start) * job.frame_stride


def _read_segment(job: FramesJob, f: FrameFile, seg: Segment, fds: dict[int, int]) -> np.ndarray:
    """A segment's frames read with ``preadv`` into a new array (a file that could not be leased)."""
    fd = fds.get(seg.file)
    if fd is None:
        try:
            fd = fds[seg.file] = os.open(f.path, os.O_RDONLY)
        except OSError as e:
            raise DataSetException(f"{f.path}: cannot open: {e}") from None
    buf = np.empty(seg.n * job.frame_stride, dtype=np.uint8)
    _preadv_all(fd, buf, f.header + seg.first * job.frame_stride, f.path, exact=True)
    return view_frames(buf, job, seg.n)


def _touched_files(job: RangesJob) -> range:
    """The files a read range job reads (from the lowest to the highest file index of its tiles)."""
    meta = job.tile_meta
    if meta.shape[0] == 0:
        return range(0)
    lo, hi = meta[:, 4], meta[:, 5]
    read = hi >= lo
    if not read.any():
        return range(0)
    return range(int(lo[read].min()), int(hi[read].max()) + 1)


class MMapBackend(IOBackend):
    name = "mmap"

    def __init__(self, enable_readahead_hints: bool = False):
        #: LiberTEM's parameter, accepted for porting; the kernel's default readahead is used.
        self.enable_readahead_hints = bool(enable_readahead_hints)

    def _frame_blocks(self, job: FramesJob) -> Generator[FrameBlock, None, None]:
        maps: dict[int, np.ndarray | None] = {}  # None: the file is read with preadv (not leased)
        leases = ReadLeases()
        fds: dict[int, int] = {}

        def frames_of(f: int) -> np.ndarray | None:
            if f in maps:
                return maps[f]
            ff = job.frame_files[f]
            m = None
            if leases.take(f, ff.path):
                leases.need(f, _frames_bytes(job, ff))
                m = map_frames(ff.path, job, ff)  # its size checked under the lease: it cannot shrink now
            elif unleased_policy() == "map":
                m = map_frames(ff.path, job, ff)
            maps[f] = m
            return m

        try:
            for b0, count, segments in frame_segments(job):
                leases.check()  # the block before is done with: nothing of a map is being read now
                parts = []
                for s in segments:
                    m = frames_of(s.file)
                    frames = m[s.first:s.first + s.n] if m is not None else _read_segment(
                        job, job.frame_files[s.file], s, fds)
                    parts.append((s.k, frames))
                yield b0, count, parts
        finally:
            leases.release()
            for fd in fds.values():
                os.close(fd)

    def _blocks(self, job: RangesJob) -> Generator[Block, None, None]:
        leases = ReadLeases()
        try:
            for f in _touched_files(job):
                if leases.take(f, job.paths[f]):
                    leases.need(f, leases.size(f))
                elif unleased_policy() == "read":  # reads that cannot fault, for the whole job
                    leases.release()
                    yield from BufferedBackend()._blocks(job)
                    return
            maps: dict[int, np.ndarray] = {}

            def source(f: int) -> np.ndarray:
                m = maps.get(f)
                if m is None:
                    m = maps[f] = _map_bytes(job.paths[f])
                return m

            n_slices = len(job.scheme)
            for t0 in range(0, job.tile_meta.shape[0], n_slices):
                leases.check()
                yield Block(job.read_ranges[t0:t0 + n_slices], source)
        finally:
            leases.release()
