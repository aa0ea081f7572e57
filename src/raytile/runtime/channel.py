"""`SnapshotChannel`: one run's results for any number of viewers, latest wins for each.

The coordinator leaves results in an :class:`~raytile.runtime.outbox.Outbox`
for one consumer. A run coordinated on the cluster may have several viewers
(the driver that started it, processes that attached to it, none at all
for a while when it runs detached), so the channel is that one consumer: a
pump thread takes from the outbox *when some viewer wants a newer result*
(or the run is over), numbers what it took, and keeps only the newest
snapshot and the run's terminal item. Each viewer asks for "anything newer
than sequence number ``n``" (:meth:`SnapshotChannel.peek`) and gets the
newest there is, so a slow viewer skips snapshots instead of holding them,
and the run publishes at the pace of its fastest viewer.

Memory: one snapshot per run, whatever the number of viewers.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from raytile.runtime.outbox import FINISHED, Outbox

__all__ = ["SnapshotChannel", "Item", "is_terminal"]

#: How often the pump looks whether the run ended while no viewer asks for results.
IDLE_CHECK_S = 0.2

#: ``(sequence number, snapshot or terminal item)`` as :meth:`SnapshotChannel.peek` returns it.
Item = tuple[int, Any]


class SnapshotChannel:
    """Pumps ``outbox`` on demand; ``run_over()`` says whether the run's coordinator ended.

    ``on_change`` is called (from the pump thread) after every new snapshot
    or terminal item, so that waiting viewers can look again.
    """

    def __init__(self, outbox: Outbox, run_over: Callable[[], bool], on_change: Callable[[], None] | None = None):
        self._outbox = outbox
        self._run_over = run_over
        self._on_change = on_change
        self._lock = threading.Lock()
        self._demand = threading.Event()
        self._seq = 0
        self._snapshot: Any = None
        self._snapshot_seq = 0
        self._terminal: Any = None
        self._thread = threading.Thread(target=self._pump, name="raytile-channel", daemon=True)
        self._thread.start()

    @property
    def terminal(self) -> Any:
        """The run's end (``FINISHED`` or its exception) once the pump took it, else None."""
        return self._terminal

    @property
    def latest(self) -> Any:
        """The newest snapshot taken (None before the first)."""
        return self._snapshot

    def peek(self, after: int) -> Item | None:
        """The newest snapshot if it is newer than ``after``, else the terminal item once there is one
        (numbered one past the last snapshot), else None (and the pump is asked for a newer one)."""
        with self._lock:
            if self._snapshot is not None and self._snapshot_seq > after:
                return self._snapshot_seq, self._snapshot
            if self._terminal is not None:
                return self._seq, self._terminal
        self._demand.set()
        return None

    def _pump(self) -> None:
        final = False
        while True:
            # after the final snapshot the run's end follows at once: take it without waiting for demand
            if not final and not self._demand.wait(IDLE_CHECK_S) and not self._run_over():
                continue
            self._demand.clear()
            item = self._outbox.take()  # a snapshot, else the terminal item (the run is over)
            with self._lock:
                self._seq += 1
                if is_terminal(item):
                    self._terminal = item
                else:
                    self._snapshot, self._snapshot_seq = item, self._seq
                    final = bool(getattr(item, "finished", False))
            if self._on_change is not None:
                self._on_change()
            if self._terminal is not None:
                return


def is_terminal(item: Any) -> bool:
    """Whether an outbox item ends the run (``FINISHED`` or the run's exception)."""
    return item is FINISHED or isinstance(item, BaseException)
