"""The executor interface: where partition tasks run.

A small surface so the coordinator drives the inline executor and the Ray
actors through one code path: put the run's parameters somewhere workers
can read them (:meth:`Executor.put_params`), submit a task, wait for some to
finish, collect or cancel them.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from raytile.common.device_class import DeviceClass
from raytile.runtime.params import PartitionResult, PartitionTask

__all__ = ["Executor", "TaskHandle", "WorkerLost", "TaskNotRun", "NoWorkerReady", "ProgressSink"]


class WorkerLost(Exception):
    """A task's worker died; the task may be retried elsewhere (internal).

    ``held`` names the partitions whose results that worker had merged and
    not yet sent: they are lost with it and must run again.
    """

    def __init__(self, message: str, held: Iterable[int] = ()):
        super().__init__(message)
        self.held = frozenset(held)


class TaskNotRun(Exception):
    """A task did not run and is to be submitted again, as it is (internal).

    The Ray executor raises it when a worker lacked a value it caches between
    tasks; the executor has noted that, so the next submission ships the value.
    """


class NoWorkerReady(Exception):
    """No worker that can run a task is ready now (internal); the task waits for one.

    Raised by ``submit`` while workers are starting or being replaced; the
    executor sets the runs' wakeup events when one becomes ready.
    """


class TaskHandle:
    """An executor's token for one submitted task, or (``task`` None) for a flush of held results
    that should deliver the partitions ``expected``."""

    def __init__(self, task: PartitionTask | None, version: int, expected: Iterable[int] = ()):
        self.task = task
        self.version = version
        self.expected = frozenset(expected)

    def describe(self) -> str:
        if self.task is not None:
            return self.task.describe()
        return f"the held results of partitions {sorted(self.expected)}"


#: Per-tile progress callback: (run_id, frames) -> None.
ProgressSink = Callable[[str, int], None]


class Executor(ABC):
    """Runs partition tasks. Implementations: InlineExecutor, RayExecutor."""

    #: Workers merge their partitions' results and send them at most this often (s); None: never.
    merge_interval_s: float | None = None

    @property
    def max_in_flight(self) -> int:
        """Tasks the coordinator keeps in flight at most (an executor with workers: as many as are ready)."""
        return 1

    @property
    def num_workers(self) -> int:
        """Worker slots; data sets pick at least this many partitions."""
        return 1

    @property
    def device_classes(self) -> frozenset[DeviceClass]:
        """Device classes with at least one worker (CPU, CUDA)."""
        return frozenset({DeviceClass.CPU})

    @property
    def full_in_flight(self) -> int:
        """Tasks in flight at most once every worker started (``max_in_flight`` counts the workers
        ready now): what a stream's bound on partitions in flight is sized by."""
        return self.max_in_flight

    @abstractmethod
    def put_params(self, params: Any) -> Any:
        """Store a run's parameters once; returns a handle tasks receive."""

    @abstractmethod
    def submit(self, task: PartitionTask, params_handle: Any, version: int,
               progress: ProgressSink | None = None) -> TaskHandle:
        """Start ``task``; may run it lazily (inline) or remotely (Ray).

        Raises :class:`NoWorkerReady` if no worker can take it now."""

    @abstractmethod
    def wait(self, run_id: str, handles: Sequence[TaskHandle], timeout: float) -> list[TaskHandle]:
        """Return the run's handles that are finished; may return none when ``timeout`` passed or the
        run's ``wakeup`` event (see :meth:`start_run`) was set. With no handles, waits for the event."""

    @abstractmethod
    def result(self, handle: TaskHandle) -> list[PartitionResult]:
        """The finished task's results: its partition's, or merged segments of several partitions
        (``PartitionResult.covers``); empty if its worker holds the result merged, to be sent later
        (see :meth:`flush`). Raises its UDFException, WorkerLost to retry, TaskNotRun to resubmit."""

    def stream_buffer(self, shape: tuple, dtype: Any) -> Any:
        """A new array to assemble a stream partition in, from the feeder thread; an executor that
        shares frames by copying may lend memory that :meth:`share_frames` then passes on without a copy."""
        return np.empty(shape, dtype=dtype)

    def share_frames(self, frames: Any) -> Any:
        """A stream partition's frames as tasks carry them (``PartitionTask.frames``): the array
        itself here; the Ray executor puts it into the object store once (workers read it zero-copy).
        Called from the stream's feeder thread, never from the coordinator's loop."""
        return frames

    def preferred(self, run_id: str) -> set[int]:
        """Partitions the executor would like next (they extend a worker's merged segment)."""
        return set()

    def flush(self, run_id: str) -> list[TaskHandle]:
        """Ask every worker that holds merged results of the run to send them; handles to wait on."""
        return []

    def cancel(self, handles: Sequence[TaskHandle]) -> None:
        """Stop tasks in flight, as far as possible."""

    def cancel_run(self, run_id: str) -> None:
        """Hook: the run was cancelled (called from any thread, at once). An executor that runs tasks
        in the coordinator's own thread stops the running one at its next tile here; the others stop
        theirs when the coordinator calls :meth:`cancel`."""

    def start_run(self, run_id: str, wakeup: threading.Event) -> None:
        """Hook: a run begins. Set ``wakeup`` whenever one of its tasks finishes (or anything else
        :meth:`wait` would return for), so that :meth:`wait` can block on it instead of polling.
        The coordinator sets it too, on a patch or a cancel, to end a :meth:`wait` early."""

    def prepare_dataset(self, dataset: Any) -> None:
        """Hook: share a data set's in-memory partitions with workers once."""

    def finish_run(self, run_id: str) -> None:
        """Hook: a run is over (finished, failed or cancelled); flush its progress, drop its state."""

    @property
    def workers(self) -> list[dict]:
        """What the workers said about themselves (name, kind, pid, host, ...); none for in-process ones."""
        return []

    def run_function(self, fn: Callable, *args: Any) -> Any:
        """Run ``fn(*args)`` on a worker and return its value (e.g. reading headers)."""
        return fn(*args)

    def close(self) -> None:
        """Release workers."""
