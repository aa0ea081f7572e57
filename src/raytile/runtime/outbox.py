"""`Outbox`: where a run's coordinator leaves results for its consumer, latest wins.

Results are cumulative (each snapshot holds everything merged so far), so a
consumer never needs an older snapshot than the newest. The outbox holds at
most one snapshot: a newer one replaces it, and the coordinator publishes a
snapshot only when the outbox is empty (see :func:`should_publish`), so a
consumer slower than the run holds at most two full copies of the results
at any time (the one it is looking at, and one waiting), however many
partitions are merged meanwhile. Measured before this existed: a 64 MiB
result with a consumer sleeping 0.2 s per partial passed 2 GB in 5 s.

The run's end (:data:`FINISHED`) or its exception is terminal: once put,
it follows the last snapshot and nothing more is accepted.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["Outbox", "FINISHED", "should_publish"]


class _Finished:
    """Outbox marker: the run is over."""

    def __repr__(self) -> str:
        return "FINISHED"

    def __reduce__(self) -> str:
        return "FINISHED"  # unpickles as the module's one instance, in any process


FINISHED = _Finished()


def should_publish(*, merged_since: int, outbox_empty: bool, finished: bool, final_only: bool) -> bool:
    """Whether the coordinator makes a snapshot now.

    Always for the last merge of a run; otherwise only if something was
    merged since the last snapshot, the consumer took that one, and it wants
    partial results at all.
    """
    if finished:
        return True
    return merged_since > 0 and outbox_empty and not final_only


class Outbox:
    """One pending snapshot plus the run's terminal item; ``take`` blocks for the next.

    ``on_take`` is called (from the consumer's thread) after each snapshot
    taken, so that the coordinator can publish the next one at once.
    """

    def __init__(self, on_take: Callable[[], None] | None = None):
        self._cond = threading.Condition()
        self._snapshot: Any = None
        self._terminal: Any = None
        self._on_take = on_take
        #: Snapshots replaced before anyone took them (a measure of consumer lag).
        self.replaced = 0

    def put_snapshot(self, snapshot: Any) -> None:
        with self._cond:
            if self._terminal is not None:
                return
            if self._snapshot is not None:
                self.replaced += 1
            self._snapshot = snapshot
            self._cond.notify_all()

    def put_terminal(self, item: Any) -> None:
        """The run's end: :data:`FINISHED` or the exception to raise. The first one put wins."""
        with self._cond:
            if self._terminal is None:
                self._terminal = item
            self._cond.notify_all()

    def drop(self) -> None:
        """Forget the pending snapshot (a cancelled run's results are of no use)."""
        with self._cond:
            self._snapshot = None

    @property
    def empty(self) -> bool:
        """True if no snapshot waits (the consumer took the last one)."""
        return self._snapshot is None

    def take(self, timeout: float | None = None) -> Any:
        """The pending snapshot, else the terminal item; waits up to ``timeout`` (None: forever).

        Raises :class:`TimeoutError` if nothing came in time.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._snapshot is not None or self._terminal is not None,
                                       timeout):
                raise TimeoutError("no result arrived in time")
            item, self._snapshot = self._snapshot, None
            if item is None:
                return self._terminal
        if self._on_take is not None:
            self._on_take()
        return item

    def take_nowait(self) -> Any:
        """Like :meth:`take`, without waiting; None if nothing is there."""
        try:
            return self.take(timeout=0)
        except TimeoutError:
            return None
