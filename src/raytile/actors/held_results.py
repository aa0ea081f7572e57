"""`HeldResults`: the ledger of partitions whose results workers hold merged, not yet sent.

With merging near the data (:mod:`raytile.runtime.segments`) a task may
return HELD: its worker merged the result into the run's state there. The
driver notes which worker holds which partitions, so that a worker lost
with them names them (``WorkerLost.held``: the coordinator runs them again)
and so that, once a run's tasks are done, each worker holding some is asked
for them (:meth:`HeldResults.flush`: ``WorkerActor.flush_run``, queued behind
the run's tasks on that actor).
"""

from __future__ import annotations

import threading
from typing import Iterable, Sequence

from raytile.actors.pool import Slot
from raytile.actors.submission import RayTaskHandle
from raytile.actors.wakeups import RunWakeups

__all__ = ["HeldResults"]


class HeldResults:
    """Per run, per worker name: the partitions that worker holds merged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, set[int]]] = {}

    def hold(self, run_id: str, worker: str, idx: int) -> None:
        with self._lock:
            self._held.setdefault(run_id, {}).setdefault(worker, set()).add(idx)

    def sent(self, run_id: str, worker: str, partitions: Iterable[int]) -> None:
        """``worker`` sent merged results covering ``partitions``: it no longer holds them."""
        with self._lock:
            self._held.setdefault(run_id, {}).setdefault(worker, set()).difference_update(partitions)

    def take(self, run_id: str, worker: str) -> set[int]:
        """What ``worker`` holds of the run, forgotten here (it was lost with them)."""
        with self._lock:
            return self._held.setdefault(run_id, {}).pop(worker, set())

    def drop(self, run_id: str | None) -> None:
        """The run ended or was cancelled (None: the Context closed, every run): nothing it held will
        be asked for."""
        with self._lock:
            if run_id is None:
                self._held.clear()
            else:
                self._held.pop(run_id, None)

    def flush(self, run_id: str, slots: Sequence[Slot], wakeups: RunWakeups) -> list[RayTaskHandle]:
        """Ask each of ``slots`` whose worker holds merged results of the run for them; a handle each,
        expecting those partitions. A worker retired meanwhile is skipped: nothing will deliver them."""
        with self._lock:
            held = {name: set(idxs) for name, idxs in self._held.get(run_id, {}).items() if idxs}
        by_name = {s.name: s for s in slots}
        handles = []
        for name, idxs in held.items():
            slot = by_name.get(name)
            if slot is None:
                continue
            handle = RayTaskHandle(None, -1, slot.actor.flush_run.remote(run_id), slot, slot.actor, run_id, None,
                                   expected=idxs)
            wakeups.ring_when_done(handle.future, run_id)
            handles.append(handle)
        return handles
