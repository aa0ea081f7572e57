"""`RunState`: the coordinator's bookkeeping of one run's tasks, and its decisions.

The coordinator (``runtime/coordinator.py``) owns one ``RunState`` and does
the effects (submit, wait, merge, publish); what to do with a task is
decided here, by plain methods without I/O, so it is tested on its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Sequence

from raytile.runtime.dispatch_policy import DISPATCH_POLICY, DispatchPolicy
from raytile.runtime.executor import TaskHandle
from raytile.runtime.params import PartitionTask

__all__ = ["RunState", "Outcome", "MAX_RETRIES", "starved_too_long"]

#: How often a task may be retried after its worker died.
MAX_RETRIES = 3


class Outcome(Enum):
    """What became of a task that came back."""

    MERGE = "merge"          #: its result is current: merge it
    STALE = "stale"          #: computed with parameters a recompute patch replaced: run it again
    RESUBMIT = "resubmit"    #: it did not run (its worker lacked a cached value): submit it again
    RETRY = "retry"          #: its worker died: run it elsewhere
    GIVE_UP = "give_up"      #: its worker died too often


@dataclass
class RunState:
    """Which tasks wait, which run, which parameters version each one needs.

    >>> state = RunState(tasks)
    >>> while not state.done: ...
    """

    tasks: Sequence[PartitionTask]
    #: Which pending task goes next (its ``segments`` policy).
    policy: DispatchPolicy = DISPATCH_POLICY

    def __post_init__(self) -> None:
        #: Since when partitions wait with nothing in flight (no worker was ready), else None.
        self.starved_since: float | None = None
        self._by_idx = {t.idx: t for t in self.tasks}
        self._spread = False
        self.pending: deque[PartitionTask] = deque(self.tasks)
        #: Partitions whose results a worker merged and holds, not yet sent (see runtime/segments.py).
        self.held: set[int] = set()
        self.in_flight: list[TaskHandle] = []
        self.needed_version: dict[int, int] = {t.idx: 0 for t in self.tasks}
        self.retries: dict[int, int] = {}
        #: Partitions merged since the last snapshot was published.
        self.merged_since_publish = 0
        #: More tasks may arrive (a stream that has not ended, see :meth:`add`).
        self.more_coming = False

    @property
    def done(self) -> bool:
        return not self.more_coming and not self.pending and not self.in_flight and not self.held

    def add(self, task: PartitionTask) -> None:
        """A task that arrived while the run goes on (a stream's partition), queued after the others."""
        self._by_idx[task.idx] = task
        self.needed_version[task.idx] = 0
        self.pending.append(task)

    def forget(self, idx: int) -> None:
        """A stream's partition is done: drop what the state holds of it (its frames with its task)."""
        self._by_idx.pop(idx, None)
        self.needed_version.pop(idx, None)
        self.retries.pop(idx, None)

    def describe_partition(self, idx: int) -> str:
        """Partition ``idx`` in words (its frames, where the state still knows its task)."""
        task = self._by_idx.get(idx)
        return task.describe() if task is not None else f"partition {idx}"

    @property
    def needs_flush(self) -> bool:
        """Everything ran, but workers still hold merged results: ask them for those."""
        return not self.pending and not self.in_flight and bool(self.held)

    def spread_segments(self) -> None:
        """Dispatch for merging near the data: a task that does not extend a worker's segment starts
        a new one in the middle of the longest run of pending partitions, so that each worker works
        through a contiguous stretch (its results merge into few segments, see runtime/segments.py;
        the choice is :meth:`SegmentSpreading.choose <raytile.runtime.dispatch_policy.SegmentSpreading.choose>`)."""
        self._spread = True

    def next_to_submit(self, max_in_flight: int, preferred: Iterable[int] = ()) -> PartitionTask | None:
        """The next task to submit, if the executor has room for one (fewer than ``max_in_flight``
        in flight): the first pending one of ``preferred`` partitions, else the one the policy picks."""
        if not self.pending or len(self.in_flight) >= max_in_flight:
            return None
        pos = self.policy.segments.choose(self.pending, set(preferred), self._spread, _task_idx)
        if pos == 0:
            return self.pending.popleft()
        task = self.pending[pos]
        del self.pending[pos]
        return task

    def submitted(self, handle: TaskHandle) -> None:
        self.in_flight.append(handle)

    def returned(self, handle: TaskHandle) -> None:
        self.in_flight.remove(handle)

    def recompute_all(self, version: int) -> None:
        """A recompute patch: every partition is needed again with ``version``."""
        for idx in self._by_idx:  # the tasks given and added, in that order
            self.needed_version[idx] = version
        self.held.clear()  # what workers hold is of the old version: judged stale if it comes
        self._requeue(list(self._by_idx))
        self.merged_since_publish = 0

    def _requeue(self, partitions: Iterable[int]) -> None:
        """Queue ``partitions`` again, except those already queued or running."""
        waiting = {t.idx for t in self.pending} | {h.task.idx for h in self.in_flight if h.task is not None}
        self.pending.extend(self._by_idx[idx] for idx in partitions if idx not in waiting)

    def judge(self, partitions: Sequence[int], result_version: int) -> Outcome:
        """A result of ``partitions`` came back computed with ``result_version``: merge it or run
        them again."""
        self.held.difference_update(partitions)
        if any(result_version < self.needed_version[idx] for idx in partitions):
            self._requeue(partitions)
            return Outcome.STALE
        self.merged_since_publish += len(partitions)
        return Outcome.MERGE

    def frames_of(self, partitions: Sequence[int]) -> int:
        return sum(self._by_idx[idx].num_frames for idx in partitions)

    def hold(self, task: PartitionTask) -> None:
        """The task's worker merged its result and holds it."""
        self.held.add(task.idx)

    def lost_held(self, partitions: Iterable[int]) -> None:
        """Held results that will not arrive (their worker died, or a flush did not return them):
        run those partitions again."""
        lost = self.held.intersection(partitions)
        self.held.difference_update(lost)
        self._requeue(sorted(lost))

    def worker_lost(self, task: PartitionTask) -> Outcome:
        """A task's worker died: retry it first, up to ``MAX_RETRIES`` times."""
        self.retries[task.idx] = self.retries.get(task.idx, 0) + 1
        if self.retries[task.idx] > MAX_RETRIES:
            return Outcome.GIVE_UP
        self.pending.appendleft(task)
        return Outcome.RETRY

    def not_run(self, task: PartitionTask) -> Outcome:
        self.pending.appendleft(task)
        return Outcome.RESUBMIT

    def published(self) -> None:
        self.merged_since_publish = 0


def starved_too_long(state: RunState, now: float, limit: float) -> bool:
    """Whether partitions have waited ``limit`` seconds with no task in flight (no worker ready).

    Notes when starving began in ``state.starved_since``; any task in
    flight resets it.
    """
    if state.in_flight or not state.pending:
        state.starved_since = None
        return False
    if state.starved_since is None:
        state.starved_since = now
    return now - state.starved_since > limit


def _task_idx(task: PartitionTask) -> int:
    return task.idx
