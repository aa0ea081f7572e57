"""`SnapshotChannel`: a run's results for any number of viewers, latest wins for each.

Results are cumulative (each snapshot holds everything merged so far), so a
viewer never needs an older snapshot than the newest. The channel holds the
newest snapshot and the run's end (:data:`FINISHED` or its exception), each
numbered. A viewer asks for "anything newer than sequence number ``n``"
(:meth:`SnapshotChannel.peek`, or a :class:`ChannelReader` that keeps ``n``
for it) and gets the newest there is, so a slow viewer skips snapshots
instead of holding them.

The run's coordinator publishes a partial snapshot only once a viewer took
the newest one (:attr:`SnapshotChannel.wants_snapshot`, see
:func:`should_publish`), and a viewer taking one wakes the coordinator
(:meth:`SnapshotChannel.on_take`), so the run publishes at the pace of its
fastest viewer and not at all while nobody looks. A viewer slower than the
run holds at most two full copies of the results at any time (the one it is
looking at, and one waiting), however many partitions are merged meanwhile;
measured before this existed: a 64 MiB result with a consumer sleeping 0.2 s
per partial passed 2 GB in 5 s. Memory: one snapshot per run, whatever the
number of viewers.

The run's end is terminal: once put, it follows the last snapshot and
nothing more is accepted, with one exception: until a viewer has read a
finished run's end (:attr:`SnapshotChannel.end_read`), the run may take it
back (:meth:`SnapshotChannel.reopen`) to compute again, for a recompute
patch that came after its last merge (see runtime/active_run.py).

>>> channel = SnapshotChannel()
>>> reader = channel.reader()
>>> channel.publish(snapshot); reader.take() is snapshot
True
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar, Union

__all__ = ["SnapshotChannel", "ChannelReader", "Item", "FINISHED", "is_terminal", "should_publish"]

#: What a channel carries: a run's :class:`~raytile.runtime.results.UDFResults`, a pipeline stream's values.
SnapshotT = TypeVar("SnapshotT")


class _Finished:
    """The channel's marker: the run is over."""

    def __repr__(self) -> str:
        return "FINISHED"

    def __reduce__(self) -> str:
        return "FINISHED"  # unpickles as the module's one instance, in any process


FINISHED = _Finished()

#: How a run ends: :data:`FINISHED`, or the exception its viewers raise.
Terminal = Union[_Finished, BaseException]
#: ``(sequence number, snapshot or terminal item)`` as :meth:`SnapshotChannel.peek` returns it.
Item = tuple[int, Union[SnapshotT, Terminal]]


def is_terminal(item: object) -> bool:
    """Whether a channel item ends the run (``FINISHED`` or the run's exception)."""
    return item is FINISHED or isinstance(item, BaseException)


def should_publish(*, merged_since: int, wanted: bool, finished: bool, final_only: bool) -> bool:
    """Whether the coordinator makes a snapshot now.

    Always for the last merge of a run; otherwise only if something was
    merged since the last snapshot, a viewer took that one (``wanted``), and
    partial results are wanted at all.
    """
    if finished:
        return True
    return merged_since > 0 and wanted and not final_only


class SnapshotChannel(Generic[SnapshotT]):
    """The newest snapshot and the run's end, numbered; see the module doc.

    ``SnapshotChannel[UDFResults]`` carries a run's results; any value type works (a pipeline
    stream's values use it too).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self._snapshot: SnapshotT | None = None
        self._snapshot_seq = 0
        self._terminal: Terminal | None = None
        self._terminal_seq = 0
        self._end_read = False  # a viewer was given the run's end
        self._taken = True  # nothing published yet: the first snapshot is wanted
        self._on_take: list[Callable[[], None]] = []
        self._on_change: list[Callable[[], None]] = []
        #: Snapshots replaced before any viewer took them (a measure of viewer lag).
        self.replaced = 0

    # -- callbacks ---------------------------------------------------------------
    def on_take(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the viewer's thread) after a viewer took a snapshot."""
        self._on_take.append(callback)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (in the publishing thread) after every new snapshot and the run's end."""
        self._on_change.append(callback)

    # -- the coordinator's side --------------------------------------------------
    def publish(self, snapshot: SnapshotT) -> None:
        """The newest snapshot: it replaces the one before (ignored once the run ended)."""
        with self._cond:
            if self._terminal is not None:
                return
            if self._snapshot is not None and not self._taken:
                self.replaced += 1
            self._seq += 1
            self._snapshot, self._snapshot_seq, self._taken = snapshot, self._seq, False
            self._cond.notify_all()
        self._changed()

    def end(self, item: Terminal) -> None:
        """The run's end: :data:`FINISHED` or the exception to raise. The first one put wins."""
        with self._cond:
            if self._terminal is not None:
                return
            self._seq += 1
            self._terminal, self._terminal_seq = item, self._seq
            self._cond.notify_all()
        self._changed()

    def reopen(self) -> bool:
        """Take back a finished run's end (the run computes again): True if done; False if the end is
        not :data:`FINISHED` or a viewer has read it already (then the run stays over)."""
        with self._cond:
            if self._terminal is not FINISHED or self._end_read:
                return False
            self._terminal = None
            return True

    @property
    def end_read(self) -> bool:
        """True once a viewer was given the run's end."""
        return self._end_read

    def drop(self) -> None:
        """Forget the newest snapshot (a cancelled run's results are of no use): viewers go on to the
        run's end."""
        with self._cond:
            self._snapshot = None

    @property
    def snapshot_seq(self) -> int:
        """The sequence number of the newest snapshot (0 if there is none)."""
        return self._snapshot_seq if self._snapshot is not None else 0

    @property
    def wants_snapshot(self) -> bool:
        """True if a viewer took the newest snapshot (or none was published yet)."""
        return self._taken

    # -- the viewers' side ---------------------------------------------------------
    @property
    def terminal(self) -> Terminal | None:
        """The run's end (``FINISHED`` or its exception) once it came, else None."""
        return self._terminal

    @property
    def latest(self) -> SnapshotT | None:
        """The newest snapshot (None before the first, and after :meth:`drop`)."""
        return self._snapshot

    def peek(self, after: int) -> Item[SnapshotT] | None:
        """The newest snapshot if it is newer than ``after``, else the run's end once it came, else None."""
        with self._cond:
            got, snapshot = self._take_newer(after)
        if snapshot:
            for callback in self._on_take:
                callback()
        return got

    def wait(self, after: int, timeout: float | None = None) -> Item[SnapshotT]:
        """Like :meth:`peek`, waiting up to ``timeout`` seconds (None: forever) for something newer
        than ``after``; raises :class:`TimeoutError` if nothing came in time."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._newer(after) is not None, timeout):
                raise TimeoutError("no result arrived in time")
            got, snapshot = self._take_newer(after)  # under the same lock: a reopen cannot take it back
        assert got is not None
        if snapshot:
            for callback in self._on_take:
                callback()
        return got

    def reader(self) -> "ChannelReader[SnapshotT]":
        """A new viewer, starting before the first snapshot."""
        return ChannelReader(self)

    def _take_newer(self, after: int) -> tuple[Item[SnapshotT] | None, bool]:
        """:meth:`_newer`, and whether it is a snapshot; notes what a viewer takes (with the lock held)."""
        got = self._newer(after)
        if got is None:
            return None, False
        if got[1] is self._snapshot:
            self._taken = True
            return got, True
        self._end_read = True
        return got, False

    def _newer(self, after: int) -> Item[SnapshotT] | None:
        if self._snapshot is not None and self._snapshot_seq > after:
            return self._snapshot_seq, self._snapshot
        if self._terminal is not None:
            return self._terminal_seq, self._terminal
        return None

    def _changed(self) -> None:
        for callback in self._on_change:
            callback()


class ChannelReader(Generic[SnapshotT]):
    """One viewer of a :class:`SnapshotChannel`: ``take`` gives the next item it has not seen (the
    newest snapshot, else the run's end), waiting for it."""

    def __init__(self, channel: SnapshotChannel[SnapshotT]):
        self._channel = channel
        self._seen = 0

    @property
    def empty(self) -> bool:
        """True if no snapshot this viewer has not seen waits."""
        return self._channel.snapshot_seq <= self._seen

    def take(self, timeout: float | None = None) -> SnapshotT | Terminal:
        """The newest snapshot not seen yet, else the run's end; waits up to ``timeout`` (None:
        forever). Raises :class:`TimeoutError` if nothing came in time."""
        seq, item = self._channel.wait(self._seen, timeout)
        self._seen = seq
        return item

    def take_nowait(self) -> SnapshotT | Terminal | None:
        """Like :meth:`take`, without waiting; None if nothing is there."""
        got = self._channel.peek(self._seen)
        if got is None:
            return None
        self._seen, item = got
        return item
