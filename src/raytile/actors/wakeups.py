"""`RunWakeups`: each run's wakeup event, set from Ray's callback thread when something it waits for is done.

The coordinator of a run blocks on its event (``Executor.wait``) instead of
polling Ray: each task's future, each progress poll and a change of the
ready workers set it. Only the coordinator clears it (see docs/coordinator.md).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["RunWakeups"]


class RunWakeups:
    """The wakeup events of the runs in progress, by run id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def start(self, run_id: str, wakeup: threading.Event) -> None:
        with self._lock:
            self._events[run_id] = wakeup

    def get(self, run_id: str) -> threading.Event | None:
        """The run's event, None for a caller that did not start the run (it waits on its futures)."""
        return self._events.get(run_id)

    def ring_when_done(self, future: Any, run_id: str) -> None:
        """Set the run's wakeup event when ``future`` is done (from Ray's callback thread)."""
        wakeup = self._events.get(run_id)
        if wakeup is not None:
            future.add_done_callback(lambda _f: wakeup.set())

    def wake_all(self) -> None:
        """The ready workers changed: every run looks again (dispatches to new workers)."""
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._events.pop(run_id, None)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
