"""`ProgressPolls`: per-tile progress of a Context's runs, long-polled from its progress actor.

Workers report frame counts to one :class:`~raytile.actors.progress.ProgressActor`
per Context, started with the workers (creating it lazily cost a process
start in the first run with progress). The driver keeps one pending
``take`` per run whose future wakes the run's coordinator when it returns;
the coordinator delivers the counts to the run's sink in its own thread and
starts the next poll. A progress actor that died is replaced: re-polling a
dead one returned at once and the coordinator spun a CPU core.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import ray

from raytile.actors.lost import WORKER_LOST
from raytile.actors.progress import ProgressActor
from raytile.actors.wakeups import RunWakeups
from raytile.common.errors import ExecutorError
from raytile.runtime.executor import ProgressSink

__all__ = ["ProgressPolls"]

log = logging.getLogger(__name__)

_RemoteProgress: Any = ray.remote(num_cpus=0)(ProgressActor)


@dataclass
class _ProgressPoll:
    """A pending ``ProgressActor.take`` of one run: its future, where its frames go, which actor."""

    future: Any
    sink: ProgressSink
    actor: Any


class ProgressPolls:
    """The Context's progress actor and the pending poll of each run with progress."""

    def __init__(self, wakeups: RunWakeups, start_timeout: float):
        self._wakeups = wakeups
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._closed = False
        self.actor: Any = _RemoteProgress.remote()
        self._started: Any = self.actor.forget.remote("").future()  # done once it runs
        self._polls: dict[str, _ProgressPoll] = {}  # run_id -> its pending poll

    def take(self, run_id: str, sink: ProgressSink) -> _ProgressPoll:
        """A long-poll of the run's progress counts, as a future that wakes the run when it returns."""
        actor = self.actor
        future = actor.take.remote(run_id, 1.0).future()
        self._wakeups.ring_when_done(future, run_id)
        return _ProgressPoll(future, sink, actor)

    def actor_for(self, run_id: str, sink: ProgressSink) -> Any:
        """The progress actor a task of the run reports to; starts the run's poll the first time."""
        if not self._started.done():
            # the first run with progress waits for the progress actor to run (it started with the
            # workers): tile reports sent to it before then would all arrive as one count
            try:
                self._started.result(timeout=self._start_timeout)
            except futures.TimeoutError:
                raise ExecutorError(f"the progress actor did not start within {self._start_timeout:.0f} s") from None
            except WORKER_LOST:
                self._replace(self.actor)
        with self._lock:
            if run_id not in self._polls:
                self._polls[run_id] = self.take(run_id, sink)
            return self.actor

    def _replace(self, dead: Any) -> None:
        """Start a new progress actor if ``dead`` is still the current one (tasks from now on use it)."""
        with self._lock:
            if self.actor is dead and not self._closed:
                log.warning("the progress actor died; starting a replacement")
                self.actor = _RemoteProgress.remote()

    def deliver(self, run_id: str) -> None:
        """If the run's poll returned: hand its frames to the run's sink and start the next poll.

        A poll that failed because the progress actor died replaces the
        actor first, so the next poll waits on a live one.
        """
        with self._lock:
            poll = self._polls.get(run_id)
        if poll is None or not poll.future.done():
            return
        try:
            frames = poll.future.result()
        except WORKER_LOST:
            frames = 0
            self._replace(poll.actor)
        with self._lock:
            if self._polls.get(run_id) is not poll:
                return
            self._polls[run_id] = self.take(run_id, poll.sink)
        if frames:
            poll.sink(run_id, frames)

    def finish(self, run_id: str) -> None:
        """Deliver the run's last progress counts and forget its poll."""
        with self._lock:
            poll = self._polls.pop(run_id, None)
            actor = self.actor
        if poll is None:
            return
        frames = 0
        try:
            frames += ray.get(actor.forget.remote(run_id), timeout=5)
            frames += poll.future.result(timeout=5)  # woken by forget: returns at once
        except Exception as e:  # progress is best effort once the run is over
            log.debug("progress drain for run %s failed: %s", run_id[:8], e)
        if frames:
            poll.sink(run_id, frames)

    def close(self) -> None:
        """Kill the progress actor; no replacement starts after this."""
        with self._lock:
            self._closed = True
            actor, self.actor = self.actor, None
            self._polls.clear()
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001  (already gone)
                pass
