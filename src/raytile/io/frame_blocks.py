"""A data set's frames in nav order, a block at a time, in bounded memory.

For consumers that want whole frames one after the other rather than a UDF
run: a pipeline's data-set source, a simulator replaying a file. Memory
stays at one block (``depth`` frames), whatever the data set's size.

>>> from raytile.io.formats.memory import MemoryDataSet        # doctest: +SKIP
>>> ds = MemoryDataSet(data=np.zeros((4, 4, 8, 8))).initialize()  # doctest: +SKIP
>>> [b.shape for b in iter_frame_blocks(ds, depth=6)]          # doctest: +SKIP
[(6, 8, 8), (6, 8, 8), (4, 8, 8)]
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from numpy.typing import DTypeLike

from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme
from raytile.io.dataset import DataSet

__all__ = ["iter_frame_blocks", "SequentialFrames"]


def iter_frame_blocks(dataset: DataSet, depth: int) -> Iterator[np.ndarray]:
    """Yield the frames of ``dataset`` as ``(k, *sig)`` blocks, ``k <= depth``, in flat nav order.

    A block may be a view of a buffer the reader reuses: copy what you keep past the next block.
    """
    sig = dataset.shape.sig.to_tuple()
    scheme = TilingScheme.make_for_shape(Shape((depth, *sig), sig_dims=len(sig)), dataset.shape.flatten_nav())
    for partition in dataset.get_partitions():
        for tile in partition.get_tiles(scheme):
            yield np.asarray(tile.data)


class SequentialFrames:
    """Frames ``[start, stop)`` of a data set, read in bounded memory, fastest when asked in order.

    Reads go through :func:`iter_frame_blocks`; a request that does not
    continue the last one starts the reader again (from the first frame), so
    a consumer that walks the scan, maybe in a cycle, reads each frame once
    a pass. Memory: one block of the reader plus what a request returns.

    >>> frames = SequentialFrames(ds, depth=64)                  # doctest: +SKIP
    >>> frames.read(0, 10).shape                                 # doctest: +SKIP
    (10, 256, 256)
    """

    def __init__(self, dataset: DataSet, depth: int = 64, dtype: DTypeLike | None = None):
        self.dataset = dataset
        self.depth = int(depth)
        self.num_frames = int(dataset.shape.nav.size)
        self.sig_shape: tuple[int, ...] = tuple(dataset.shape.sig.to_tuple())
        #: What :meth:`read` returns (None: the data set's own dtype); values are cast as numpy assigns them.
        self.dtype = np.dtype(dataset.dtype if dtype is None else dtype)
        self._blocks: Iterator[np.ndarray] | None = None
        self._pending = np.empty((0, *self.sig_shape), dataset.dtype)  # read, not yet returned
        self._cursor = 0  # index of self._pending[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """A new array of frames ``[start, stop)`` (``0 <= start <= stop <= num_frames``)."""
        if not 0 <= start <= stop <= self.num_frames:
            raise IndexError(f"frames [{start}, {stop}) outside 0..{self.num_frames}")
        if self._blocks is None or start < self._cursor:
            self._blocks, self._cursor = iter_frame_blocks(self.dataset, self.depth), 0
            self._pending = self._pending[:0]
        out = np.empty((stop - start, *self.sig_shape), self.dtype)
        filled = 0
        while filled < stop - start:
            if len(self._pending) == 0:
                self._pending = np.array(next(self._blocks), copy=True)
            skip = min(len(self._pending), max(0, start + filled - self._cursor))
            self._pending, self._cursor = self._pending[skip:], self._cursor + skip
            take = min(len(self._pending), stop - start - filled)
            out[filled:filled + take] = self._pending[:take]
            self._pending, self._cursor = self._pending[take:], self._cursor + take
            filled += take
        return out
