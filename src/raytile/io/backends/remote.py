"""The remote backend: a partition's byte ranges fetched from an object store by the worker that runs it.

Each nav block's reads (the frames of the frames path, or the coalesced
read ranges of the read range path) are joined with the next blocks' into
groups of about ``request_bytes`` (the format's ``get_io_size()``), cut into
requests of at most that size, and a pool of threads
keeps up to ``concurrency`` ranged GETs in flight, running ahead into the
next blocks while the current one is decoded. What is in flight is bounded
by ``concurrency * request_bytes`` plus the block being consumed, so a
worker's memory follows the partitions it runs, not the object's size.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Sequence

import numpy as np

from raytile.io.backends.base import Block, FrameBlock, FramesJob, IOBackend, RangesJob, Segment, frame_segments, \
    view_frames
from raytile.io.read_ranges import plan_block_reads
from raytile.io.store import DEFAULT_CONCURRENCY, DEFAULT_REQUEST_BYTES, ObjectStore

__all__ = ["RemoteBackend"]

#: Ranges of one object closer than this are fetched in one request (the gap's bytes are cheaper than a GET).
COALESCE_GAP = 256 * 1024


@dataclass
class _Pending:
    """A group of blocks: its buffer, the requests filling it and each block's ``(offset, nbytes)`` in it."""

    buf: np.ndarray
    futures: list[Future] = field(default_factory=list)
    nbytes: int = 0
    blocks: list[tuple[int, int]] = field(default_factory=list)


def _constant(buf: np.ndarray) -> Callable[[int], np.ndarray]:
    """``source(file_idx)`` of a block whose reads of every file sit in one buffer."""
    return lambda f: buf


class RemoteBackend(IOBackend):
    """Ranged GETs of an :class:`~raytile.io.store.ObjectStore`, several in flight, blocks read ahead."""

    name = "remote"

    def __init__(self, store: ObjectStore, request_bytes: int | None = None, concurrency: int = DEFAULT_CONCURRENCY):
        self.store = store
        self.request_bytes = max(64 * 1024, int(request_bytes or DEFAULT_REQUEST_BYTES))
        self.concurrency = max(1, int(concurrency))

    def _requests(self, reads: Sequence[tuple[int, int, int, int]]) -> Iterator[tuple[int, int, int, int]]:
        """``(file, start, stop, buf_pos)`` reads cut into requests of at most ``request_bytes``."""
        step = self.request_bytes
        for f, start, stop, pos in reads:
            for a in range(start, stop, step):
                b = min(stop, a + step)
                yield f, a, b, pos + a - start

    def _groups(self, plans: Iterator[tuple[int, list[tuple[int, int, int, int]]]]
                ) -> Iterator[tuple[int, list[tuple[int, int, int, int]], list[tuple[int, int]]]]:
        """Consecutive blocks joined until they hold ``request_bytes``: ``(nbytes, reads, blocks)``, the
        reads placed one block after the other in one buffer and merged where a block's bytes continue
        the previous block's in the same object (a request may then span blocks: tiles smaller than a
        request do not make requests smaller), ``blocks`` each block's ``(offset, nbytes)`` in it."""
        reads: list[list[int]] = []
        blocks: list[tuple[int, int]] = []
        total = 0
        for nbytes, block_reads in plans:
            for f, a, b, pos in block_reads:
                last = reads[-1] if reads else None
                if last is not None and last[0] == f and last[2] == a and last[3] + last[2] - last[1] == total + pos:
                    last[2] = b
                else:
                    reads.append([f, a, b, total + pos])
            blocks.append((total, nbytes))
            total += nbytes
            if total >= self.request_bytes:
                yield total, [(r[0], r[1], r[2], r[3]) for r in reads], blocks
                reads, blocks, total = [], [], 0
        if blocks:
            yield total, [(r[0], r[1], r[2], r[3]) for r in reads], blocks

    def _pipeline(self, paths: list[str], plans: Iterator[tuple[int, list[tuple[int, int, int, int]]]]
                  ) -> Generator[np.ndarray, None, None]:
        """The filled buffer of each planned block ``(nbytes, reads)``, in order. Blocks are fetched in
        groups of about ``request_bytes`` (:meth:`_groups`); requests of the next groups are in flight
        while the caller uses the current one (up to ``concurrency`` requests, at least one group ahead)."""
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="raytile-fetch")
        window = self.concurrency * self.request_bytes
        queue: deque[_Pending] = deque()
        in_flight = 0
        groups = self._groups(plans)
        groups_left = True

        def fill(buf: np.ndarray, f: int, a: int, b: int, pos: int) -> None:
            buf[pos:pos + b - a] = np.frombuffer(self.store.get_range(paths[f], a, b), dtype=np.uint8)

        def submit_one() -> None:
            nonlocal groups_left, in_flight
            try:
                nbytes, reads, blocks = next(groups)
            except StopIteration:
                groups_left = False
                return
            p = _Pending(np.empty(max(nbytes, 1), dtype=np.uint8), nbytes=nbytes, blocks=blocks)
            for f, a, b, pos in self._requests(reads):
                p.futures.append(pool.submit(fill, p.buf, f, a, b, pos))
            queue.append(p)
            in_flight += nbytes

        try:
            while True:
                while groups_left and (len(queue) < 2 or in_flight < window):
                    submit_one()
                if not queue:
                    return
                p = queue.popleft()
                for fut in p.futures:
                    fut.result()
                in_flight -= p.nbytes
                for offset, nbytes in p.blocks:
                    yield p.buf[offset:offset + max(nbytes, 1)]
        finally:
            for p in queue:
                for fut in p.futures:
                    fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def _blocks(self, job: RangesJob) -> Generator[Block, None, None]:
        n_slices = len(job.scheme)
        rrs: deque[np.ndarray] = deque()

        def plans() -> Iterator[tuple[int, list[tuple[int, int, int, int]]]]:
            for t0 in range(0, job.tile_meta.shape[0], n_slices):
                reads, rr = plan_block_reads(job.read_ranges, job.tile_meta, t0, t0 + n_slices, 1, COALESCE_GAP)
                rrs.append(rr)
                total = int(reads[-1, 3] + reads[-1, 2] - reads[-1, 1]) if reads.shape[0] else 0
                yield total, [tuple(r) for r in reads.tolist()]

        for buf in self._pipeline(job.paths, plans()):
            yield Block(rrs.popleft(), _constant(buf))

    def _frame_blocks(self, job: FramesJob) -> Generator[FrameBlock, None, None]:
        layouts: deque[tuple[int, int, list[tuple[Segment, int]]]] = deque()

        def plans() -> Iterator[tuple[int, list[tuple[int, int, int, int]]]]:
            for b0, count, segments in frame_segments(job):
                reads, placed, pos = [], [], 0
                for seg in segments:
                    start = job.frame_files[seg.file].header + seg.first * job.frame_stride
                    n = seg.n * job.frame_stride
                    reads.append((seg.file, start, start + n, pos))
                    placed.append((seg, pos))
                    pos += n
                layouts.append((b0, count, placed))
                yield pos, reads

        for buf in self._pipeline(job.paths, plans()):
            b0, count, placed = layouts.popleft()
            parts = [(seg.k, view_frames(buf[pos:pos + seg.n * job.frame_stride], job, seg.n))
                     for seg, pos in placed]
            yield b0, count, parts
