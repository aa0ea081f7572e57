"""`RunState`: the coordinator's bookkeeping of one run's tasks, and its decisions.

The coordinator (``runtime/coordinator.py``) owns one ``RunState`` and does
the effects (submit, wait, merge, publish); what to do with a task is
decided here, by plain methods without I/O, so it is tested on its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

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

    def __post_init__(self) -> None:
        #: Since when partitions wait with nothing in flight (no worker was ready), else None.
        self.starved_since: float | None = None
        self.pending: deque[PartitionTask] = deque(self.tasks)
        self.in_flight: list[TaskHandle] = []
        self.needed_version: dict[int, int] = {t.idx: 0 for t in self.tasks}
        self.retries: dict[int, int] = {}
        #: Partitions merged since the last snapshot was published.
        self.merged_since_publish = 0

    @property
    def done(self) -> bool:
        return not self.pending and not self.in_flight

    def next_to_submit(self, max_in_flight: int) -> PartitionTask | None:
        """The next task to submit, if the executor has room for one."""
        if self.pending and len(self.in_flight) < max_in_flight:
            return self.pending.popleft()
        return None

    def submitted(self, handle: TaskHandle) -> None:
        self.in_flight.append(handle)

    def returned(self, handle: TaskHandle) -> None:
        self.in_flight.remove(handle)

    def recompute_all(self, version: int) -> None:
        """A recompute patch: every partition is needed again with ``version``."""
        queued = {t.idx for t in self.pending}
        busy = {h.task.idx for h in self.in_flight}
        for task in self.tasks:
            self.needed_version[task.idx] = version
            if task.idx not in queued and task.idx not in busy:
                self.pending.append(task)
        self.merged_since_publish = 0

    def judge(self, task: PartitionTask, result_version: int) -> Outcome:
        """A task's result came back computed with ``result_version``: merge it or run it again."""
        if result_version < self.needed_version[task.idx]:
            self.pending.append(task)
            return Outcome.STALE
        self.merged_since_publish += 1
        return Outcome.MERGE

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
