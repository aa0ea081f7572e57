"""Buffered and direct-I/O backends: ``os.preadv`` into reused aligned buffers (read ahead), then decode."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends.base import Block, IOBackend, ReadJob
from raytile.io.read_ranges import META_COUNT, RR_START, plan_block_reads

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
    view = memoryview(buf)
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
    current one is decoded and consumed. With a plain job (the bytes are the
    pixels) a block read in one piece is handed out as views of the buffer,
    without decoding.
    """

    name = "buffered"
    align = 1
    supports_straight = False

    def __init__(self):
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

    def _blocks(self, job: ReadJob) -> Iterator[Block]:
        self._paths = job.paths
        n_slices = len(job.scheme)
        starts = range(0, job.tile_meta.shape[0], n_slices)
        buffers: list[np.ndarray | None] = [None, None]
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raytile-read")
        pending = None
        try:
            if len(starts):
                pending = pool.submit(self._read_block, job, starts[0], n_slices, buffers, 0)
            for i in range(len(starts)):
                block = pending.result()
                pending = None
                if i + 1 < len(starts):
                    pending = pool.submit(self._read_block, job, starts[i + 1], n_slices, buffers, (i + 1) % 2)
                yield block
        finally:
            if pending is not None:
                pending.cancel()
                try:
                    pending.result()
                except Exception:  # the consumer stopped early; a read error there is moot
                    pass
            pool.shutdown(wait=True)
            self._close()

    def _read_block(self, job: ReadJob, t0: int, n_slices: int, buffers: list, which: int) -> Block:
        """Read tiles ``[t0, t0 + n_slices)`` into ``buffers[which]`` (grown as needed)."""
        reads, rr = plan_block_reads(job.read_ranges, job.tile_meta, t0, t0 + n_slices, self.align, COALESCE_GAP)
        total = int(reads[-1, 3] + reads[-1, 2] - reads[-1, 1]) if reads.shape[0] else 0
        buf = buffers[which]
        if buf is None or buf.shape[0] < total:
            buf = buffers[which] = aligned_empty(max(total, ALIGN), ALIGN)
        for f, start, stop, pos in reads.tolist():
            self._read(f, buf[pos:pos + stop - start], start)
        frames = None
        if job.plain and reads.shape[0] == 1:
            count = int(job.tile_meta[t0, META_COUNT])
            sig = job.scheme.dataset_shape.sig.to_tuple()
            start = int(rr[0, 0, RR_START])
            nbytes = count * math.prod(sig) * job.native_dtype.itemsize
            frames = buf[start:start + nbytes].view(job.native_dtype).reshape((count,) + sig)
        return Block(rr, lambda f: buf, frames)

    def _read(self, f: int, dest: np.ndarray, offset: int) -> None:
        _preadv_all(self._fd(f), dest, offset, self._paths[f], exact=True)


class DirectBackend(BufferedBackend):
    """O_DIRECT reads (Linux): page cache bypassed; aligned offsets, lengths and buffer."""

    name = "direct"
    align = ALIGN

    def __init__(self):
        super().__init__()
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
