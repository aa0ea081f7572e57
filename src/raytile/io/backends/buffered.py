"""Buffered and direct-I/O backends: ``os.preadv`` into reused aligned buffers (read ahead), then tiles."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generator, Sequence, TypeVar

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import (Block, FrameBlock, FramesJob, IOBackend, RangesJob, ReadJob, Segment,
                                      frame_segments, view_frames)
from raytile.io.read_ranges import plan_block_reads

T = TypeVar("T")
R = TypeVar("R")

#: Alignment of the buffer (and, for O_DIRECT, of offsets and lengths).
ALIGN = 4096
#: Ranges of one file closer than this are read in one go.
COALESCE_GAP = 64 * 1024


def aligned_empty(nbytes: int, align: int = ALIGN) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data pointer is a multiple of ``align``."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    shift = (-raw.ctypes.data) % align
    return raw[shift:shift + nbytes]


def _preadv_all(fd: int, buf: np.ndarray, offset: int, path: str, exact: bool) -> int:
    """Read ``len(buf)`` bytes at ``offset``; short only at end of file (an error if ``exact``)."""
    view = buf.data
    done = 0
    total = len(buf)
    while done < total:
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            break
        done += n
    if exact and done < total:
        raise DataSetException(
            f"{path}: short read: wanted {total} bytes at offset {offset}, got {done} (file truncated?)"
        )
    return done


class BufferedBackend(IOBackend):
    """``os.preadv`` of each nav block's coalesced read ranges into a page-aligned buffer, then decode.

    A helper thread reads the next block into a second buffer while the
    current one is decoded and consumed. On the frames path a block's frames
    are handed out as views of the buffer.
    """

    name = "buffered"
    align = 1

    def __init__(self, max_buffer_size: int = 16 * 2**20):
        #: LiberTEM's parameter, accepted for porting; raytile sizes its two buffers per nav block.
        self.max_buffer_size = int(max_buffer_size)
        self._fds: dict[int, int] = {}
        self._paths: list[str] = []

    def _open_fd(self, path: str) -> int:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError as e:
            raise DataSetException(f"{path}: cannot open: {e}") from None

    def _close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def _fd(self, f: int) -> int:
        fd = self._fds.get(f)
        if fd is None:
            fd = self._fds[f] = self._open_fd(self._paths[f])
        return fd

    def _read_ahead(self, job: ReadJob, items: Sequence[T],
                    read: Callable[[T, list, int], R]) -> Generator[R, None, None]:
        """``read(item, buffers, which)`` of each item in order; a helper thread reads the next item
        into the other of two buffers while the caller consumes the current one."""
        self._paths = job.paths
        buffers: list[np.ndarray | None] = [None, None]
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raytile-read")
        pending: Future[R] | None = None
        try:
            if len(items):
                pending = pool.submit(read, items[0], buffers, 0)
            for i in range(len(items)):
                assert pending is not None  # submitted for item i before
                result = pending.result()
                pending = None
                if i + 1 < len(items):
                    pending = pool.submit(read, items[i + 1], buffers, (i + 1) % 2)
                yield result
        finally:
            if pending is not None:
                pending.cancel()
                try:
                    pending.result()
                except Exception:  # the consumer stopped early; a read error there is moot
                    pass
            pool.shutdown(wait=True)
            self._close()

    def _blocks(self, job: RangesJob) -> Generator[Block, None, None]:
        n_slices = len(job.scheme)
        starts = range(0, job.tile_meta.shape[0], n_slices)
        return self._read_ahead(job, starts, lambda t0, buffers, which: self._read_block(job, t0, n_slices,
                                                                                        buffers, which))

    def _frame_blocks(self, job: FramesJob) -> Generator[FrameBlock, None, None]:
        blocks = list(frame_segments(job))
        return self._read_ahead(job, blocks, lambda block, buffers, which: self._read_frames(job, block, buffers,
                                                                                           which))

    @staticmethod
    def _buffer(buffers: list, which: int, nbytes: int) -> np.ndarray:
        buf = buffers[which]
        if buf is None or buf.shape[0] < nbytes:
            buf = buffers[which] = aligned_empty(max(nbytes, ALIGN), ALIGN)
        return buf

    def _read_block(self, job: RangesJob, t0: int, n_slices: int, buffers: list, which: int) -> Block:
        """Read tiles ``[t0, t0 + n_slices)`` into ``buffers[which]`` (grown as needed)."""
        reads, rr = plan_block_reads(job.read_ranges, job.tile_meta, t0, t0 + n_slices, self.align, COALESCE_GAP)
        total = int(reads[-1, 3] + reads[-1, 2] - reads[-1, 1]) if reads.shape[0] else 0
        buf = self._buffer(buffers, which, total)
        for f, start, stop, pos in reads.tolist():
            self._read(f, buf[pos:pos + stop - start], start)
        return Block(rr, lambda f: buf)

    def _read_frames(self, job: FramesJob, block: tuple[int, int, list[Segment]], buffers: list,
                     which: int) -> FrameBlock:
        """Read a frames-path block's segments into ``buffers[which]``, each at an ``ALIGN`` boundary."""
        b0, count, segments = block
        a = self.align
        reads = []
        pos = 0
        for seg in segments:
            ff = job.frame_files[seg.file]
            start = ff.header + seg.first * job.frame_stride
            stop = start + seg.n * job.frame_stride
            lo, hi = start // a * a, -(-stop // a) * a
            reads.append((seg, lo, hi, pos, start - lo))
            pos += -(-(hi - lo) // ALIGN) * ALIGN
        buf = self._buffer(buffers, which, pos)
        parts = []
        for seg, lo, hi, pos, skip in reads:
            self._read(seg.file, buf[pos:pos + hi - lo], lo)
            parts.append((seg.k, view_frames(buf[pos + skip:pos + skip + seg.n * job.frame_stride], job, seg.n)))
        return b0, count, parts

    def _read(self, f: int, dest: np.ndarray, offset: int) -> None:
        _preadv_all(self._fd(f), dest, offset, self._paths[f], exact=True)


class DirectBackend(BufferedBackend):
    """O_DIRECT reads (Linux): page cache bypassed; aligned offsets, lengths and buffer."""

    name = "direct"
    align = ALIGN

    def __init__(self, max_buffer_size: int = 16 * 2**20):
        super().__init__(max_buffer_size)
        self.direct_ok: dict[str, bool] = {}

    def _open_fd(self, path: str) -> int:
        flag = getattr(os, "O_DIRECT", 0)
        if flag:
            try:
                fd = os.open(path, os.O_RDONLY | flag)
                self.direct_ok[path] = True
                return fd
            except OSError:
                pass  # e.g. tmpfs: no O_DIRECT; read buffered, advise the kernel not to cache
        fd = super()._open_fd(path)
        self.direct_ok[path] = False
        return fd

    def _read(self, f: int, dest: np.ndarray, offset: int) -> None:
        fd = self._fd(f)
        path = self._paths[f]
        try:
            done = _preadv_all(fd, dest, offset, path, exact=False)
        except OSError as e:
            if e.errno != 22:  # EINVAL: this file system wants other alignment; go buffered
                raise DataSetException(f"{path}: read failed: {e}") from None
            os.close(fd)
            self._fds[f] = fd = BufferedBackend._open_fd(self, path)
            done = _preadv_all(fd, dest, offset, path, exact=False)
        # aligned reads may run past the end of the file; the ranges inside must be complete
        if done < len(dest):
            size = os.fstat(fd).st_size
            if offset + done < min(size, offset + len(dest)):
                raise DataSetException(f"{path}: short read at offset {offset + done} (file truncated?)")
            dest[done:] = 0
        if not self.direct_ok.get(path) and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, offset, len(dest), os.POSIX_FADV_DONTNEED)


__all__ = ["BufferedBackend", "DirectBackend", "aligned_empty"]
