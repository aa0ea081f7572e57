"""Test UDFs shared by the tests (shipped to Ray workers by value, see conftest)."""

from __future__ import annotations

import os
import time

import numpy as np

from raytile.udf.base import UDF
from raytile.udf.sum import SumUDF


class InputFlagsUDF(UDF):
    """Records, per frame, facts about the input tile the worker got.

    ``writeable``: the tile's writeable flag; ``owns``: 1 if the root of the
    tile's ``base`` chain is a numpy array that owns its memory (a copy), 0 if
    the memory belongs to something else (the object store buffer);
    ``pid``: the worker process.
    """

    def get_preferred_input_dtype(self):
        return np.uint8  # result_type with the data set dtype: no conversion, tiles are views

    def get_result_buffers(self):
        return {
            "writeable": self.buffer(kind="nav", dtype="int8"),
            "owns": self.buffer(kind="nav", dtype="int8"),
            "pid": self.buffer(kind="nav", dtype="int64"),
            "sum": self.buffer(kind="sig", dtype="int64"),
        }

    def process_tile(self, tile):
        root = tile
        while isinstance(getattr(root, "base", None), np.ndarray):
            root = root.base
        owns = isinstance(root, np.ndarray) and root.base is None and root.flags.owndata
        self.results.writeable[:] = int(tile.flags.writeable)
        self.results.owns[:] = int(owns)
        self.results.pid[:] = os.getpid()
        self.results.sum[:] += tile.sum(axis=0, dtype=np.int64)

    def merge(self, dest, src):
        dest.writeable[:] = src.writeable
        dest.owns[:] = src.owns
        dest.pid[:] = src.pid
        dest.sum[:] += src.sum


class WriteInputUDF(UDF):
    def get_preferred_input_dtype(self):
        return np.uint8

    def get_result_buffers(self):
        return {"x": self.buffer(kind="nav", dtype="float32")}

    def process_tile(self, tile):
        tile[:] = 0


class ScaledSumUDF(UDF):
    """Sum of frames times ``scale``, with an optional per-partition ``delay`` (s)."""

    def __init__(self, scale=1.0, delay=0.0, **kwargs):
        super().__init__(scale=scale, delay=delay, **kwargs)

    def get_preferred_input_dtype(self):
        return np.float64

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="float64")}

    def process_partition(self, partition):
        if self.params.delay:
            time.sleep(self.params.delay)
        self.results.intensity[:] += self.params.scale * partition.sum(axis=0)

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity


class RingUDF(UDF):
    """Per-frame intensity inside a ring ``ri < r <= ro`` around the sig centre (params patchable)."""

    def __init__(self, ri=0.0, ro=4.0, delay=0.0, **kwargs):
        super().__init__(ri=ri, ro=ro, delay=delay, **kwargs)

    def get_preferred_input_dtype(self):
        return np.float64

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", dtype="float64")}

    def process_partition(self, partition):
        if self.params.delay:
            time.sleep(self.params.delay)
        m = ring_mask(partition.shape[1:], self.params.ri, self.params.ro)
        self.results.intensity[:] = (partition * m).sum(axis=(1, 2))


def ring_mask(shape, ri, ro):
    y, x = np.indices(shape)
    cy, cx = (shape[0] - 1) / 2, (shape[1] - 1) / 2
    r = np.hypot(y - cy, x - cx)
    return ((r > ri) & (r <= ro)).astype(np.float64)


class FailingUDF(UDF):
    """Raises in process_partition on the partition holding frame ``bad_frame``."""

    def __init__(self, bad_frame=0, **kwargs):
        super().__init__(bad_frame=bad_frame, **kwargs)

    def get_result_buffers(self):
        return {"x": self.buffer(kind="nav", dtype="float32")}

    def process_frame(self, frame):
        if self.meta.slice.origin[0] == self.params.bad_frame:
            raise RuntimeError("deliberate failure in frame processing")
        self.results.x[:] = 1


class SlowTileUDF(UDF):
    """Sleeps ``delay`` seconds per tile of depth ``depth`` (for cancellation and progress)."""

    def __init__(self, delay=0.01, depth=2, **kwargs):
        super().__init__(delay=delay, depth=depth, **kwargs)

    def get_tiling_preferences(self):
        return {"depth": self.params.depth, "total_size": 1 << 30}

    def get_preferred_input_dtype(self):
        return np.float64

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", dtype="float64")}

    def process_tile(self, tile):
        time.sleep(self.params.delay)
        self.results.intensity[:] = tile.sum(axis=tuple(range(1, tile.ndim)))


class LoggingTileUDF(SlowTileUDF):
    """SlowTileUDF that appends one line per tile to the file ``log`` (to observe work stopping)."""

    def __init__(self, delay=0.01, depth=1, log="", **kwargs):
        super().__init__(delay=delay, depth=depth, log=log, **kwargs)

    def process_tile(self, tile):
        super().process_tile(tile)
        with open(self.params.log, "a") as f:
            f.write("x\n")


class RefOffsetSumUDF(UDF):
    """Sum of frames plus ``offset`` per frame, where ``offset`` is an object ref in the parameters.

    Parameters that hold Ray object refs must reach the workers through Ray's
    serializer, which keeps the object alive while a worker uses it.
    """

    def __init__(self, offset_ref):
        super().__init__(offset_ref=offset_ref)

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="float64")}

    def process_tile(self, tile):
        import ray

        offset = ray.get(self.params.offset_ref)
        self.results.intensity[:] += tile.sum(axis=0) + offset * tile.shape[0]

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity


class BadMergeUDF(UDF):
    """A frame-sum UDF whose ``merge`` raises on the partition starting at frame ``bad_start``."""

    def __init__(self, bad_start=0, **kwargs):
        super().__init__(bad_start=bad_start, **kwargs)

    def get_result_buffers(self):
        return {"total": self.buffer(kind="single", dtype="float64"),
                "start": self.buffer(kind="single", dtype="int64")}

    def process_partition(self, partition):
        self.results.total[:] += partition.sum()
        self.results.start[:] = self.meta.slice.origin[0]

    def merge(self, dest, src):
        if int(src.start[0]) == self.params.bad_start:
            raise ValueError("deliberate failure in merge")
        dest.total[:] += src.total


class WideSingleUDF(UDF):
    """A ``single`` result of ``size`` float32 values (a large result, cheap to compute): element 0
    sums the frames, element -1 counts them."""

    def __init__(self, size=1 << 24, **kwargs):
        super().__init__(size=size, **kwargs)

    def get_result_buffers(self):
        return {"acc": self.buffer(kind="single", extra_shape=(self.params.size,), dtype="float32")}

    def process_partition(self, partition):
        self.results.acc[0] += partition.sum()
        self.results.acc[-1] += partition.shape[0]

    def merge(self, dest, src):
        dest.acc[:] += src.acc


class FrameSumsToFileUDF(UDF):
    """Creates a .npy of per-frame sums in ``preprocess`` on the main node (once: it checks), and each
    partition writes its frames' sums into it; also reports whether the instance carried ``extra``."""

    def __init__(self, path="", **kwargs):
        super().__init__(path=path, **kwargs)

    def get_result_buffers(self):
        return {"carried": self.buffer(kind="single", dtype="int64")}

    def preprocess(self):
        if not os.path.exists(self.params.path):
            n = self.meta.dataset_shape.nav.size
            np.lib.format.open_memmap(self.params.path, mode="w+", dtype=np.float64, shape=(n,)).flush()

    def process_partition(self, partition):
        out = np.load(self.params.path, mmap_mode="r+")
        start = self.meta.slice.origin[0]
        out[start:start + partition.shape[0]] = partition.reshape(partition.shape[0], -1).sum(axis=1)
        out.flush()
        self.results.carried[:] += int(hasattr(self, "extra"))

    def merge(self, dest, src):
        dest.carried[:] += src.carried


class FailingPreprocessUDF(FrameSumsToFileUDF):
    def preprocess(self):
        raise OSError("cannot create the output file")


class SlowSumUDF(SumUDF):
    """SumUDF that sleeps 2 ms per tile: a consumer slower than a live sender (backpressure tests)."""

    def process_tile(self, tile):
        time.sleep(0.002)
        super().process_tile(tile)
