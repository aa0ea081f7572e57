"""Per-tile progress: workers report frame counts to one `ProgressActor` per Context.

A task's :class:`TileReporter` batches its counts to at most one message
per ``PROGRESS_FLUSH_S``; the driver long-polls :meth:`ProgressActor.take`
per run (see ``RayExecutor``), so progress arrives while partitions run.
"""

from __future__ import annotations

import asyncio
import time

import ray

__all__ = ["ProgressActor", "TileReporter", "PROGRESS_FLUSH_S"]

#: Progress messages from a worker are batched to at most one per this many seconds.
PROGRESS_FLUSH_S = 0.1


class TileReporter:
    """Per-tile progress from a worker, batched into at most one message per PROGRESS_FLUSH_S."""

    def __init__(self, actor, run_id: str):
        self._actor = actor
        self._run_id = run_id
        self._pending = 0
        self._last = time.monotonic()
        self._ref = None

    def add(self, frames: int) -> None:
        self._pending += frames
        now = time.monotonic()
        if now - self._last >= PROGRESS_FLUSH_S:
            self._flush(now)

    def _flush(self, now: float) -> None:
        if self._pending:
            self._ref = self._actor.add.remote(self._run_id, self._pending)
            self._pending = 0
        self._last = now

    def close(self) -> None:
        """Send what is left and wait until the progress actor has it (before the result returns)."""
        self._flush(time.monotonic())
        if self._ref is not None:
            try:
                ray.get(self._ref, timeout=10)
            except Exception:
                pass


class ProgressActor:
    """Collects per-tile frame counts from workers; the driver long-polls ``take``."""

    def __init__(self):
        self._counts: dict[str, int] = {}
        self._events: dict[str, asyncio.Event] = {}

    def _event(self, run_id: str) -> asyncio.Event:
        ev = self._events.get(run_id)
        if ev is None:
            ev = self._events[run_id] = asyncio.Event()
        return ev

    @ray.method(enable_task_events=False)  # per tile report and per poll: no task events (see ray_start.py)
    async def add(self, run_id: str, frames: int) -> None:
        self._counts[run_id] = self._counts.get(run_id, 0) + frames
        self._event(run_id).set()

    @ray.method(enable_task_events=False)
    async def take(self, run_id: str, timeout: float) -> int:
        """Frames reported since the last take; waits up to ``timeout`` for some."""
        ev = self._event(run_id)
        if not self._counts.get(run_id) and timeout > 0:
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        ev.clear()
        return self._counts.pop(run_id, 0)

    @ray.method(enable_task_events=False)
    async def forget(self, run_id: str) -> int:
        """The run's last counts; wakes a pending ``take`` of it (which then returns 0)."""
        frames = self._counts.pop(run_id, 0)
        ev = self._events.pop(run_id, None)
        if ev is not None:
            ev.set()
        return frames
