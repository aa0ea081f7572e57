"""`PartitionSource`: where a run's partitions come from, as its data set declares it.

Every run pulls its partitions from a source (Ray Data's ``InputDataBuffer``
is the model: the executor takes inputs from an input operator, and the end
of the input is an event like any other). A data set declares one of two
kinds with :meth:`~raytile.io.dataset.DataSet.partition_source`:

- :class:`FixedPartitions` (the default): the data set's
  ``get_partitions()``, all known when the run is planned (files, memory).
  Nothing arrives later: the input has ended from the start.
- :class:`StreamedPartitions`: partitions that arrive while the run goes on
  (a live detector, a pipeline's sink, a user's iterable), described by a
  :class:`StreamSpec`. :meth:`PartitionSource.pull` yields each one's
  ``(index, frames)`` as it comes; the iterator ending is the end of the
  input, an exception from it the source's failure.

How the pulled partitions reach a run (a feeder thread, a bounded inlet) is
the runtime's business (runtime/stream_feed.py, runtime/run_input.py).

The vocabulary of frame delivery that is not one format's lives here too:
:func:`dense_frames` (in-memory frames an executor shares with its workers
once, for any data set whose partitions are ``FrameDelivery.SHARED``) and
:class:`StreamStopped`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import numpy as np

from raytile.io.dataset import FrameDelivery

if TYPE_CHECKING:
    from raytile.io.dataset import DataSet

__all__ = ["PartitionSource", "FixedPartitions", "StreamedPartitions", "StreamSpec", "StreamStopped",
           "PulledPartitions", "Allocate", "Stop", "dense_frames"]

#: Where a partition that batches do not fill exactly is assembled: ``allocate(shape, dtype)``.
Allocate = Callable[[tuple, np.dtype], np.ndarray]
#: Asked before each pull of a source: True once the run that reads it is over.
Stop = Callable[[], bool]


@dataclass(frozen=True)
class StreamSpec:
    """What a run needs to know about a stream: partitions per scan, how many scans (0: until the
    source ends) and how many partitions may be in flight at most (None: the executor decides)."""

    partitions_per_scan: int
    scans: int
    max_in_flight: int | None = None


class StreamStopped(Exception):
    """The reader of a source stopped it (``pull(stop=...)``): its run is over."""


class PulledPartitions(Protocol):
    """What :meth:`PartitionSource.pull` returns: ``(index, frames)`` in arrival order, and ``close``
    (closes the source)."""

    def __iter__(self) -> Iterator[tuple[int, Any]]: ...

    def __next__(self) -> tuple[int, Any]: ...

    def close(self) -> None: ...


class PartitionSource(ABC):
    """Where a run's partitions come from (see the module doc).

    ``stream`` is what planning records of the source (None: a fixed list);
    :meth:`pull` is what a reader of the source calls while the run goes on.
    """

    @property
    @abstractmethod
    def stream(self) -> StreamSpec | None:
        """The stream's :class:`StreamSpec`; None for a fixed list of partitions."""

    @abstractmethod
    def pull(self, allocate: Allocate = np.empty, stop: Stop | None = None) -> PulledPartitions:
        """``(index, frames)`` of each partition as it arrives; ends with the input. ``allocate``
        makes the arrays partitions are assembled in; once ``stop()`` says True the source is
        pulled no more and the iterator raises :class:`StreamStopped`."""


class FixedPartitions(PartitionSource):
    """The data set's ``get_partitions()``, known when the run is planned: nothing arrives later
    (each task reads, or carries, its partition's frames), and the input has ended from the start."""

    @property
    def stream(self) -> None:
        return None

    def pull(self, allocate: Allocate = np.empty, stop: Stop | None = None) -> PulledPartitions:
        return _Nothing()


class StreamedPartitions(PartitionSource):
    """Partitions that arrive while the run goes on: ``spec`` describes them, ``pull`` (the data
    set's reader, with :meth:`PartitionSource.pull`'s signature) yields them."""

    def __init__(self, spec: StreamSpec, pull: Callable[[Allocate, Stop | None], PulledPartitions]):
        self._spec = spec
        self._pull = pull

    @property
    def stream(self) -> StreamSpec:
        return self._spec

    def pull(self, allocate: Allocate = np.empty, stop: Stop | None = None) -> PulledPartitions:
        return self._pull(allocate, stop)


class _Nothing:
    """A fixed source's pull: its input has ended."""

    def __iter__(self) -> "_Nothing":
        return self

    def __next__(self) -> tuple[int, Any]:
        raise StopIteration

    def close(self) -> None:
        pass


def dense_frames(dataset: "DataSet") -> dict[int, Any]:
    """The in-memory frames of a data set per partition index that executors share with their workers
    once (``Partition.shared_frames``); empty for file-backed and sparse data sets (their tasks carry
    or read their data)."""
    shared = {p.idx: p.shared_frames() for p in dataset.get_partitions()
              if p.frame_delivery is FrameDelivery.SHARED}
    return {idx: frames for idx, frames in shared.items() if frames is not None}
