"""The ``stream`` format: frames that arrive while a run goes on, from an iterable or async iterable.

A source yields numpy batches ``(k, *sig_shape)`` in nav order, ``k`` free
to vary from batch to batch. :meth:`StreamDataSet.partitions` cuts them into
partitions of ``frames_per_partition`` frames (the last one of a scan may be
shorter) and checks every batch: shape, dtype, not more frames than the data
set holds, not fewer when the source ends. A source that raises ends the
stream with a :class:`~raytile.common.errors.DataSetException` naming the
source's error.

A source that declares ``csr_batches`` (:class:`CSRSource`: a live receiver of
an event detector, ASI Timepix3) yields scipy CSR matrices ``(k,
prod(sig_shape))`` instead: the partitions carry their events as CSR (rows
cut and stacked, never made dense), the data set's ``array_backends`` are
scipy CSR, and UDFs that take sparse tiles get CSR tiles
(:class:`SparseStreamPartition`); the run converts them for dense-only UDFs.

``preprocess`` (a :class:`FrameTransform`, e.g. a
:class:`raytile.pipeline.frame_stacks.FrameStackPipeline`) turns each
partition's frames into what the UDFs see, where the partition is read
(on the worker): the source yields frames of ``sig_shape`` and ``dtype``,
the data set's shape and dtype are the transform's output.

A scan is ``nav_shape`` frames; ``scans`` says how many the stream holds
(1 by default; 0: as many as the source yields, ending on a scan
boundary). A run over several scans gives per-scan results (see
docs/streams.md).

This module only reads and checks; how partitions reach the workers (a
bounded inlet, ``ray.put``) is the runtime's and the executors' business
(``runtime/stream_feed.py``).

>>> ds = ctx.load("stream", frames=batches, nav_shape=(64, 64), sig_shape=(256, 256), dtype="uint16")
>>> for part in ctx.run_udf_iter(dataset=ds, udf=SumUDF()): ...
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.formats.sparse import SCIPY_CSR, SparsePartition
from raytile.io.partition_source import Allocate, PulledPartitions, StreamedPartitions, StreamSpec, StreamStopped

__all__ = ["StreamDataSet", "StreamPartition", "SparseStreamPartition", "CSRSource", "FrameTransform",
           "default_frames_per_partition", "iterate_batches", "LossReporting", "RepeatableSource", "CountingSource",
           "PartitionAligned", "PARTITION_BYTES", "MIN_PARTITIONS_PER_SCAN"]

#: Default partition size of a stream, in bytes of raw frames: small, so partial results flow, and large
#: enough that the fixed cost of a task (its call and reply, its result buffers, about 1-2 ms on 2 CPUs)
#: stays small beside its frames (benchmarks/bench_stream.py, 2 workers: 4096 frames of 128 KiB in
#: 16 MiB partitions 170-190 ms, in 32 MiB partitions 130-137 ms; one ``ray.put`` per partition, where
#: it is used: 3.2 GB/s for 4 MiB objects, 6.2 GB/s for 16 MiB, 9.9 GB/s for 32 MiB).
PARTITION_BYTES = 32 * 1024 * 1024
#: By default a scan is cut into at least this many partitions (when it has that many frames).
MIN_PARTITIONS_PER_SCAN = 8

def default_frames_per_partition(scan_frames: int, frame_bytes: int,
                                 min_partitions: int = MIN_PARTITIONS_PER_SCAN) -> int:
    """Frames per partition for a stream: about ``PARTITION_BYTES``, and at least
    ``min_partitions`` partitions per scan (live acquisitions ask for fewer: see
    :func:`raytile.live.receiver.live_frames_per_partition`).

    >>> default_frames_per_partition(64 * 64, 256 * 256 * 2)  # 128 KiB frames: 256 frames, 32 MiB
    256
    >>> default_frames_per_partition(64, 4096)                 # 256 KiB scan: 8 partitions
    8
    """
    by_bytes = max(1, PARTITION_BYTES // max(1, frame_bytes))
    by_count = max(1, math.ceil(scan_frames / max(1, min_partitions)))
    return max(1, min(by_bytes, by_count, scan_frames))


@runtime_checkable
class LossReporting(Protocol):
    """A source that can lose frames (a live receiver) and counts them: the stream data set reports the
    count in each partial result (:meth:`StreamDataSet.frames_dropped`)."""

    @property
    def frames_dropped(self) -> int: ...


@runtime_checkable
class CountingSource(Protocol):
    """A source that keeps statistics of what it delivered (a live receiver: frames delivered and lost,
    updated while the run goes on): the stream data set shows them as :attr:`StreamDataSet.stats`."""

    @property
    def stats(self) -> Any: ...


@runtime_checkable
class PartitionAligned(Protocol):
    """A source that can cut its arrays where the stream's partitions end (a live receiver): before it
    is read, the stream sets ``batch`` to ``(frames_per_partition, scan_frames)``, and arrays that fill
    a partition exactly are handed on without a copy."""

    batch: tuple[int, int] | None


@runtime_checkable
class CSRSource(Protocol):
    """A source that yields scipy CSR matrices ``(k, prod(sig_shape))`` while ``csr_batches`` is True
    (a live receiver of an event detector): the stream keeps them sparse. A stream that cannot use
    them (``preprocess`` takes dense frames) sets ``csr_batches`` to False before it reads the source,
    which then yields dense arrays ``(k, *sig_shape)``."""

    csr_batches: bool


@runtime_checkable
class RepeatableSource(Protocol):
    """A source each iteration of which yields the next frames (a live acquisition: each iteration reads
    the next scan from the detector's connection): a stream over it may be read by one run after
    another, each run reading the next scans (LiberTEM-live's meaning of ``run_udf`` on one acquisition)."""

    @property
    def repeatable(self) -> bool: ...


@runtime_checkable
class FrameTransform(Protocol):
    """What ``preprocess=`` takes: a picklable callable from a stack of source frames ``(k, *in)`` to the
    stack the UDFs see ``(k, *sig_shape)`` of ``dtype``; ``check_input`` raises ConfigValidationError
    for source frames it cannot take."""

    @property
    def sig_shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def check_input(self, sig_shape: tuple[int, ...], dtype: Any) -> None: ...

    def __call__(self, stack: np.ndarray) -> np.ndarray: ...


class StreamPartition(Partition):
    """One partition of a stream: its slice of a scan, and its frames once they arrived (``data``);
    ``preprocess`` (or None) turns them into the data set's frames when the partition is read."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, data: Any = None, scan: int = 0,
                 preprocess: FrameTransform | None = None):
        super().__init__(meta, partition_slice, idx)
        self.data = data
        self.scan = scan
        self.preprocess = preprocess

    def _source(self) -> Any:
        if self.data is None:
            raise DataSetException(f"{self.describe()}: its frames have not arrived (a stream partition is "
                                   "read by the run it arrives in)")
        if self.preprocess is None:
            return self.data
        frames = self.preprocess(self.data)
        want = (self.shape[0],) + tuple(self.meta.shape.sig)
        if getattr(frames, "shape", None) != want or frames.dtype != self.meta.raw_dtype:
            raise DataSetException(f"{self.describe()}: preprocess {self.preprocess!r} made "
                                   f"{getattr(frames, 'shape', type(frames).__name__)} "
                                   f"{getattr(frames, 'dtype', '')}, expected {want} {self.meta.raw_dtype}")
        return frames

    def describe(self) -> str:
        return f"stream partition {self.idx} (scan {self.scan}, frames {self.start}:{self.stop})"


class SparseStreamPartition(StreamPartition, SparsePartition):
    """A partition of a stream of CSR batches (:class:`CSRSource`): its ``data`` is a scipy CSR matrix
    ``(frames, pixels)``, tiled as the sparse formats' partitions are (CSR tiles, or any backend the
    run asks for; a ROI selects rows)."""

    def get_io_size(self) -> int | None:
        """A tile of events is small whatever its frames' dense size: the whole partition's dense bytes,
        so tiles are as deep as the UDFs ask (32 frames by default) instead of the dense default's 4 MiB
        (4 frames of 512x512 float32), whose per-tile costs (a row slice, a reduction to a dense signal)
        came to 4x the UDFs' work on a Timepix3 stream (benchmarks/bench_live_asi_tpx3.py)."""
        return self.shape[0] * self.meta.shape.sig.size * self.meta.raw_dtype.itemsize


def iterate_batches(source: Any) -> Iterator[Any]:
    """The items of an iterable, or of an async iterable driven by an event loop of its own in the
    calling thread (the feeder's); closing this generator closes the source."""
    if hasattr(source, "__aiter__"):
        yield from _iterate_async(source)
        return
    it = iter(source)
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _iterate_async(source: Any) -> Iterator[Any]:
    loop = asyncio.new_event_loop()
    ait = source.__aiter__()
    try:
        while True:
            try:
                item = loop.run_until_complete(ait.__anext__())
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(ait, "aclose", None)
        try:
            if aclose is not None:
                loop.run_until_complete(aclose())
        finally:
            loop.close()


class StreamDataSet(DataSet):
    """Frames from a Python iterable or async iterable of numpy batches ``(k, *sig_shape)``.

    ``nav_shape`` is one scan; ``scans`` the number of scans (default 1, 0
    for as many as the source yields). ``frames_per_partition`` (default
    :func:`default_frames_per_partition`) sets the partition size, and so
    how often partial results come; ``max_partitions_in_flight`` how many
    partitions may be between the source and their merged result at once
    (default: twice the workers plus two): the source is not read further
    (backpressure) until one is done.

    A stream is read once, by the first run over it; a :class:`RepeatableSource` (a live acquisition)
    is read by one run after another, each reading the next scans. Batches are handed on
    as they are when they fill a partition exactly (else copied into one):
    yield a new array per batch, never refill one already yielded.

    >>> ds = ctx.load("stream", frames=gen(), nav_shape=(64, 64), sig_shape=(256, 256), dtype="uint16")
    """

    format_name = "stream"
    params_schema = {
        "frames": {"type": "iterable", "required": True},
        "nav_shape": {"type": "shape", "required": True},
        "sig_shape": {"type": "shape", "required": True},
        "dtype": {"type": "dtype", "required": True},
        "frames_per_partition": {"type": "int", "min": 1},
        "scans": {"type": "int", "min": 0},
        "max_partitions_in_flight": {"type": "int", "min": 1},
        "preprocess": {"type": "callable"},
    }

    def __init__(self, frames: Any, nav_shape: tuple[int, ...], sig_shape: tuple[int, ...], dtype: Any,
                 frames_per_partition: int | None = None, scans: int = 1,
                 max_partitions_in_flight: int | None = None, preprocess: FrameTransform | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self._frames = frames
        self._nav_shape = tuple(nav_shape)
        self._sig_shape = tuple(sig_shape)
        self._dtype = np.dtype(dtype)
        self._fpp = frames_per_partition
        self._scans = scans
        self._max_in_flight = max_partitions_in_flight
        if preprocess is not None:
            if not isinstance(preprocess, FrameTransform):
                raise DataSetException(f"stream: parameter 'preprocess' must have sig_shape, dtype, check_input "
                                       f"and __call__ (e.g. a FrameStackPipeline), got {type(preprocess).__name__}")
            preprocess.check_input(self._sig_shape, self._dtype)
        self._preprocess = preprocess
        #: The source's batches are CSR and stay so (no preprocess, which takes dense frames).
        self._csr = isinstance(frames, CSRSource) and bool(frames.csr_batches)
        if self._csr and preprocess is not None:
            frames.csr_batches = False
            self._csr = False
        if self._csr:
            self.array_backends = (SCIPY_CSR,)
        self._claim = threading.Lock()
        self._claimed = False

    def _do_initialize(self) -> DataSetMeta:
        sig, dtype = self._sig_shape, self._dtype
        if self._preprocess is not None:
            sig, dtype = tuple(self._preprocess.sig_shape), np.dtype(self._preprocess.dtype)
        shape = Shape(self._nav_shape + sig, sig_dims=len(sig))
        return DataSetMeta(shape=shape, raw_dtype=dtype)

    @property
    def preprocess(self) -> FrameTransform | None:
        """What turns the source's frames into the data set's, on the worker (None: nothing)."""
        return self._preprocess

    def __getstate__(self) -> dict:
        raise DataSetException("a stream data set cannot be sent to another process: its source lives here")

    # -- geometry ------------------------------------------------------------------
    @property
    def scan_frames(self) -> int:
        return self.shape.nav.size

    @property
    def frames_per_partition(self) -> int:
        if self._fpp is not None:
            return min(self._fpp, self.scan_frames)
        raw_frame_bytes = math.prod(self._sig_shape) * self._dtype.itemsize  # what a partition carries
        return default_frames_per_partition(self.scan_frames, raw_frame_bytes)

    @property
    def num_partitions(self) -> int:
        """Partitions per scan."""
        return math.ceil(self.scan_frames / self.frames_per_partition)

    @property
    def scans(self) -> int:
        """Scans the stream holds; 0: as many as the source yields."""
        return self._scans

    @property
    def spec(self) -> StreamSpec:
        return StreamSpec(self.num_partitions, self._scans, self._max_in_flight)

    def get_slices(self) -> list[Slice]:
        fpp, n, sig = self.frames_per_partition, self.scan_frames, tuple(self.shape.sig)
        return [Slice((start,) + (0,) * len(sig), Shape((min(fpp, n - start),) + sig, sig_dims=len(sig)))
                for start in range(0, n, fpp)]

    def get_partitions(self) -> list[Partition]:
        """One scan's partitions, without frames (what a run plans with; frames come with the stream)."""
        cls = SparseStreamPartition if self._csr else StreamPartition
        return [cls(self.meta, sl, idx, preprocess=self._preprocess) for idx, sl in enumerate(self.get_slices())]

    def get_cache_key(self) -> Any:
        return ("stream", id(self))

    def frames_dropped(self) -> int:
        """The source's count of lost frames, if it keeps one (:class:`LossReporting`), else 0."""
        return int(self._frames.frames_dropped) if isinstance(self._frames, LossReporting) else 0

    @property
    def stats(self) -> Any:
        """The source's own statistics, if it keeps some (:class:`CountingSource`: a live acquisition's
        frames delivered and lost, ``aq.stats``), else None."""
        return self._frames.stats if isinstance(self._frames, CountingSource) else None

    def partition_source(self) -> StreamedPartitions:
        """This stream as the source of a run's partitions (the declaration
        :meth:`DataSet.partition_source` asks for): its :attr:`spec`, read by :meth:`partitions`;
        DataSetException once a run read it (a stream is read once), or, for a :class:`RepeatableSource`,
        while a run reads it."""
        if self.consumed:
            raise DataSetException(self._claimed_message())
        return StreamedPartitions(self.spec, self.partitions)

    @property
    def repeatable(self) -> bool:
        """True when one run after another may read this stream, each the next scans
        (its source is a :class:`RepeatableSource`)."""
        return isinstance(self._frames, RepeatableSource) and bool(self._frames.repeatable)

    @property
    def consumed(self) -> bool:
        """True once a run read (or began to read) this stream; for a repeatable one, while a run reads it."""
        return self._claimed

    def _claimed_message(self) -> str:
        if self.repeatable:
            return ("this acquisition is being read by a run; the next run on it can start when that one "
                    "ended (it reads the next scan)")
        return "this stream was read by a run already; load a new stream for the next run"

    # -- reading -------------------------------------------------------------------
    def partitions(self, allocate: Allocate = np.empty,
                   stop: Callable[[], bool] | None = None) -> PulledPartitions:
        """``(index, frames)`` of each partition in arrival order, index ``scan * partitions_per_scan
        + partition``; raises DataSetException for bad batches, a short stream or a failing source.

        A partition that batches do not fill exactly is assembled in an array from
        ``allocate(shape, dtype)`` (the reader may hand back arrays it has done with, see
        runtime/stream_feed.py). Claims the stream: a second call raises (for a repeatable stream:
        until the first generator is closed or done). Closing the generator closes the source.
        ``stop``: asked before each pull of the source; once it says True the source is pulled
        no more and closed, and the generator raises :class:`StreamStopped`.
        """
        with self._claim:
            if self._claimed:
                raise DataSetException(self._claimed_message())
            self._claimed = True
        if isinstance(self._frames, PartitionAligned):  # arrays come cut where the partitions end: no copy
            self._frames.batch = (self.frames_per_partition, self.scan_frames)
        batches = iterate_batches(self._frames)
        return _Claimed(self._cut(batches if stop is None else _until(batches, stop), allocate),
                        self._release)

    def _release(self) -> None:
        """A repeatable stream's claim ends with the run that read it."""
        if self.repeatable:
            with self._claim:
                self._claimed = False

    def _cut(self, batches: Iterator[Any], allocate: Allocate) -> Iterator[tuple[int, Any]]:
        try:
            yield from (self._cut_csr(batches) if self._csr else self._cut_open(batches, allocate))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _pieces(self, batches: Iterator[Any], check: Callable[[Any, int], Any]) -> Iterator[_Piece]:
        """The batches (each passed through ``check(batch, n)``) cut at partition bounds, in order; the
        frame count checked against the data set's as they come, and at the end."""
        slices = self.get_slices()
        per_scan, scan_frames = len(slices), self.scan_frames
        total = None if self._scans == 0 else self._scans * scan_frames
        frame = 0  # frames received so far
        filled = 0  # frames of the partition being filled
        for n, batch in enumerate(_guarded(batches)):
            batch = check(batch, n)
            k = batch.shape[0]
            self._check_count(frame + k, total, n)
            pos = 0
            while pos < k:
                scan, in_scan = divmod(frame, scan_frames)
                p = in_scan // slices[0].shape[0]
                size = slices[p].shape[0]
                take = min(k - pos, size - filled)
                yield _Piece(batch, pos, pos + take, scan * per_scan + p, size, filled)
                filled = (filled + take) % size
                frame += take
                pos += take
        self._check_end(frame, total)

    def _cut_open(self, batches: Iterator[Any], allocate: Allocate) -> Iterator[tuple[int, np.ndarray]]:
        part: np.ndarray | None = None  # the partition being filled
        for piece in self._pieces(batches, self._check_batch):
            rows = piece.batch[piece.start:piece.stop]
            if piece.offset == 0 and piece.completes and rows.flags.c_contiguous:
                yield piece.index, rows  # fills a partition exactly: handed on as it is
                continue
            if part is None:
                part = allocate((piece.size,) + self._sig_shape, self._dtype)
            part[piece.offset:piece.offset + len(rows)] = rows
            if piece.completes:
                done, part = part, None
                yield piece.index, done

    def _cut_csr(self, batches: Iterator[Any]) -> Iterator[tuple[int, Any]]:
        """As :meth:`_cut_open` for CSR batches: a batch that fills a partition exactly is handed on as
        it is, else the partition's rows are cut from the batches and stacked (still CSR)."""
        import scipy.sparse as sp

        pieces: list[Any] = []  # the rows of the partition being filled
        for piece in self._pieces(batches, self._check_csr_batch):
            whole = piece.start == 0 and piece.stop == piece.batch.shape[0]
            pieces.append(piece.batch if whole else piece.batch[piece.start:piece.stop])
            if piece.completes:
                done = pieces[0] if len(pieces) == 1 else sp.vstack(pieces, format="csr")
                pieces = []
                yield piece.index, done

    def _check_count(self, count: int, total: int | None, n: int) -> None:
        if total is not None and count > total:
            raise DataSetException(
                f"the stream's source yielded more frames than the data set holds: batch {n} brings "
                f"the count to {count}, nav_shape {self._nav_shape} x {self._scans} scan(s) hold {total}")

    def _check_end(self, frame: int, total: int | None) -> None:
        scan_frames = self.scan_frames
        missing = (total - frame) if total is not None else (-frame) % scan_frames
        if missing:
            what = (f"nav_shape {self._nav_shape} x {self._scans} scan(s) need {total}" if total is not None
                    else f"scan {frame // scan_frames} lacks {missing} of its {scan_frames}")
            raise DataSetException(f"the stream's source ended after {frame} frames; {what}")

    def _check_csr_batch(self, batch: Any, n: int) -> Any:
        import scipy.sparse as sp

        pixels = math.prod(self._sig_shape)
        if not sp.issparse(batch) or batch.format != "csr":
            raise DataSetException(f"the stream's batch {n} is a {type(batch).__name__}, expected a scipy CSR "
                                   f"matrix of shape (k, {pixels}) (the source declares csr_batches)")
        if batch.ndim != 2 or batch.shape[1] != pixels:
            raise DataSetException(f"the stream's batch {n} has shape {batch.shape}, expected (k, {pixels}) for "
                                   f"sig_shape {self._sig_shape}")
        if batch.dtype != self._dtype:
            raise DataSetException(f"the stream's batch {n} has dtype {batch.dtype}, the data set's dtype is "
                                   f"{self._dtype}")
        return batch

    def _check_batch(self, batch: Any, n: int) -> np.ndarray:
        sig = self._sig_shape
        if not isinstance(batch, np.ndarray):
            raise DataSetException(f"the stream's batch {n} is a {type(batch).__name__}, expected a numpy array "
                                   f"of shape (k, {', '.join(map(str, sig))})")
        if batch.ndim != len(sig) + 1 or batch.shape[1:] != sig:
            raise DataSetException(f"the stream's batch {n} has shape {batch.shape}, expected (k, "
                                   f"{', '.join(map(str, sig))}) for sig_shape {sig}")
        if batch.dtype != self._dtype:
            raise DataSetException(f"the stream's batch {n} has dtype {batch.dtype}, the data set's dtype is "
                                   f"{self._dtype}")
        return batch


class _Claimed:
    """A stream's partitions generator that calls ``release`` once it is done, failed or closed
    (closed before it started too, when a generator's own ``finally`` would not run)."""

    def __init__(self, parts: Iterator[tuple[int, np.ndarray]], release: Callable[[], None]):
        self._parts, self._release = parts, release
        self._released = False

    def __iter__(self) -> "_Claimed":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        try:
            return next(self._parts)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._parts, "close", None)
            if close is not None:
                close()
        finally:
            if not self._released:
                self._released = True
                self._release()


def _until(batches: Iterator[Any], stop: Callable[[], bool]) -> Iterator[Any]:
    """``batches`` while ``stop()`` is False (asked before each pull); then StreamStopped. Closing
    this generator closes ``batches``."""
    try:
        while not stop():
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch
        raise StreamStopped("the stream's reader stopped it")
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class _Piece:
    """Frames ``start:stop`` of ``batch`` go to partition ``index`` (``size`` frames) from its frame ``offset``."""

    batch: Any
    start: int
    stop: int
    index: int
    size: int
    offset: int

    @property
    def completes(self) -> bool:
        """Whether the partition is full with this piece."""
        return self.offset + self.stop - self.start == self.size


def _guarded(batches: Iterator[Any]) -> Iterator[Any]:
    """The source's items; an exception it raises becomes a DataSetException naming it."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (DataSetException, StreamStopped):
            raise
        except Exception as e:
            raise DataSetException(f"the stream's source raised {type(e).__name__}: {e}") from e
        yield batch
