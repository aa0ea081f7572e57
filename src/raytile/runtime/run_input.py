"""`RunInput`: a run's partitions as the coordinator's *admit* phase takes them.

Every run pulls its tasks from an input, whatever its data set's
:class:`~raytile.io.partition_source.PartitionSource` (Ray Data's
``InputDataBuffer`` is the model: the scheduling loop takes inputs as they
are there, and the end of the input is an event it sees like any other):

- :class:`FixedInput` (a fixed list: files, memory): every task is there at
  the first turn, and the input has ended from the start;
- :class:`StreamInput` (a stream): a feeder thread pulls the source into a
  bounded :class:`~raytile.runtime.stream_feed.PartitionInlet` (here, or in
  the driver when the coordinator runs on the cluster), ``take`` turns what
  arrived into tasks of its scan, the stream's end or failure arrives
  through the inlet, and a partition's frames go as soon as its task
  returned (:meth:`RunInput.release`), so that the inlet lets the source go on.

The input also says what differs between the two for the rest of the run:
whether workers may merge its partitions before sending
(:attr:`RunInput.merges_near_data`), the accumulator its results go into,
the progress it expects, and its statistics. :func:`run_input` picks one from
the plan; the coordinator has no other knowledge of streams.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Callable, Iterable

from raytile.io.partition_source import StreamSpec
from raytile.runtime.dispatch_policy import DISPATCH_POLICY
from raytile.runtime.executor import Executor
from raytile.runtime.params import PartitionTask
from raytile.runtime.plan import RunPlan
from raytile.runtime.results import ResultAccumulator
from raytile.runtime.scans import ScanResults
from raytile.runtime.stream_feed import PartitionInlet, StreamFeeder

__all__ = ["RunInput", "FixedInput", "StreamInput", "run_input"]


class RunInput(ABC):
    """The partitions of one run, taken by the coordinator's admit phase (see the module doc)."""

    #: Workers may merge the partitions they ran before sending (runtime/segments.py). False for a
    #: stream: each partition's result is merged on its own, into its scan's (runtime/scans.py).
    merges_near_data: bool = True
    #: Where the process that reads a stream puts its partitions; None for a fixed input.
    inlet: PartitionInlet | None = None

    @abstractmethod
    def take(self) -> list[PartitionTask]:
        """The tasks that arrived since the last call (never blocks); raises the source's failure."""

    @property
    @abstractmethod
    def ended(self) -> bool:
        """True once the input ended and everything that arrived was taken."""

    @abstractmethod
    def accumulator(self, make: Callable[[], ResultAccumulator]) -> ResultAccumulator | ScanResults:
        """What the run's results are merged into; ``make`` makes one accumulator of the plan's."""

    @abstractmethod
    def expected(self) -> tuple[int, int]:
        """Frames and partitions the run's progress counts to (0: not known)."""

    def start(self, executor: Executor, run_id: str, cancelled: Callable[[], bool]) -> None:
        """The run begins: start reading the source if it is read in this process (not if
        ``cancelled()`` says the run was cancelled meanwhile)."""

    def release(self, idx: int) -> Iterable[int]:
        """Partition ``idx``'s task returned: the partitions whose tasks the run may forget now
        (their frames are gone)."""
        return ()

    def stop(self) -> None:
        """The run is cancelled: pull the source no more."""

    def close(self) -> None:
        """The run is over."""

    @property
    def stats(self) -> dict:
        """What the input adds to the coordinator's statistics."""
        return {}


class FixedInput(RunInput):
    """A fixed list of tasks, there from the start; the input has ended."""

    def __init__(self, tasks: list[PartitionTask]):
        self._tasks: list[PartitionTask] | None = list(tasks)
        self._expected = (sum(t.num_frames for t in tasks), len(tasks))

    def take(self) -> list[PartitionTask]:
        tasks, self._tasks = self._tasks or [], None
        return tasks

    @property
    def ended(self) -> bool:
        return self._tasks is None

    def accumulator(self, make: Callable[[], ResultAccumulator]) -> ResultAccumulator:
        return make()

    def expected(self) -> tuple[int, int]:
        return self._expected


class StreamInput(RunInput):
    """A stream's partitions, as they arrive in the run's inlet (see the module doc).

    ``templates`` are one scan's tasks without frames (those with frames in
    the ROI); ``capacity`` bounds the partitions between arrival and done;
    ``on_change`` is called on each arrival, end and failure (the
    coordinator's wakeup). ``dataset`` is the stream where it is read in this
    process, else None (the driver feeds the inlet of a coordinator actor).
    """

    merges_near_data = False

    def __init__(self, spec: StreamSpec, templates: list[PartitionTask], capacity: int,
                 on_change: Callable[[], None], dataset: Any = None):
        self._spec = spec
        self._templates = {t.idx: t for t in templates}
        self._dataset = dataset
        self._feeder: StreamFeeder | None = None  # reads the source, if it is in this process
        self._inlet = self.inlet = PartitionInlet(capacity, on_change)

    def start(self, executor: Executor, run_id: str, cancelled: Callable[[], bool]) -> None:
        if self._dataset is None:  # read by the process that has the source
            return
        inlet = self._inlet
        self._feeder = StreamFeeder(self._dataset, inlet.put, lambda e: inlet.fail(e) if e else inlet.end(),
                                    executor.share_frames, name=f"raytile-stream-{run_id[:8]}",
                                    allocate=executor.stream_buffer)
        if cancelled():  # a cancel before the feeder was there to stop
            self._feeder.stop()
        self._feeder.start()

    def take(self) -> list[PartitionTask]:
        tasks = []
        per_scan = self._spec.partitions_per_scan
        for idx, frames in self._inlet.take():
            template = self._templates.get(idx % per_scan)
            if template is None:  # the ROI selects none of its frames
                self._inlet.release(idx)
                continue
            part = copy.copy(template.partition)
            part.idx, part.scan = idx, idx // per_scan
            tasks.append(replace(template, partition=part, idx=idx, frames=frames))
        return tasks

    @property
    def ended(self) -> bool:
        return self._inlet.ended

    def accumulator(self, make: Callable[[], ResultAccumulator]) -> ScanResults:
        return ScanResults(make, self._spec.partitions_per_scan, len(self._templates))

    def expected(self) -> tuple[int, int]:
        scans = self._spec.scans
        return sum(t.num_frames for t in self._templates.values()) * scans, len(self._templates) * scans

    def release(self, idx: int) -> Iterable[int]:
        self._inlet.release(idx)
        return (idx,)

    def stop(self) -> None:
        if self._feeder is not None:
            self._feeder.stop()  # the source is pulled no more from now on, not from the loop's end
        self._inlet.close()  # and a feeder waiting for room is let go

    def close(self) -> None:
        self._inlet.close()  # the feeder stops reading the source

    @property
    def stats(self) -> dict:
        return {"stream_partitions": self._inlet.arrivals, "stream_max_in_flight": self._inlet.max_outstanding,
                "stream_capacity": self._inlet.capacity}


def run_input(plan: RunPlan, executor: Executor, on_change: Callable[[], None]) -> RunInput:
    """The input of a run planned as ``plan``: its fixed tasks, or its stream's (bounded by the
    stream's ``max_in_flight``, else as the dispatch policy says: see runtime/dispatch_policy.py)."""
    if plan.stream is None:
        return FixedInput(plan.tasks)
    capacity = DISPATCH_POLICY.stream.capacity(plan.stream.max_in_flight, executor.full_in_flight)
    return StreamInput(plan.stream, plan.tasks, capacity, on_change, plan.dataset)
