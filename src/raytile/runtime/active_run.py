"""`ActiveRun`: one run while it goes on, wherever it is hosted (named apart from `raytile.live`, the
detectors), and `RunView`, a viewer of it in the same process.

Design. Every run has the same three parts, whoever started it and
whoever watches it:

- its parameter versions (:class:`~raytile.runtime.param_versions.ParamVersions`):
  a live patch is checked, applied and numbered there, once;
- its UDF set (what it computes; what a viewer that attaches gets);
- its viewers' latest-wins channel (:class:`~raytile.runtime.channel.SnapshotChannel`):
  the newest snapshot and the run's end, numbered, read by any number of
  viewers, each at its own pace.

An ``ActiveRun`` owns these three and the
:class:`~raytile.runtime.coordinator.Coordinator` thread that works on them
(dispatches with the newest version, publishes into the channel). Its id is
the plan's run id, the one id the run has everywhere. The hosts differ only
in where the viewers are, never in what a run is:

- in the driver (``coordinator="driver"``, ``runtime/host.py``), a viewer
  is a :class:`RunView` of the run in the same process;
- in the coordinator actor (``coordinator="actor"``,
  ``actors/coordinator_actor.py``), the actor keeps its ``ActiveRun`` objects by
  id; a viewer in another process (``actors/actor_host.py``'s ``RemoteRun``)
  asks the actor for what is newer than the sequence number it saw, which
  waits on the channel (a long poll: no thread per run);
- behind Serve, the replica's Context coordinates on the actor, so a served
  run is an ``ActiveRun`` there too: its id is the id ``raytile runs`` lists and
  ``Context.attach`` takes, and the replica is one more viewer of it.

A patch that comes late. A run's coordinator ends its thread as soon as
the last partition is merged, but its viewers may not have read the end
yet: a GUI that patches from its loop, on a snapshot that turned out to be
the final one, is such a case. A recompute patch then still takes effect:
if no viewer has read the run's end, the run takes it back
(:meth:`SnapshotChannel.reopen`) and a new coordinator computes every
partition again with the newest parameters, so the final result equals a
fresh run with them. Once a viewer read the end (or the run was cancelled or
failed) a patch raises :class:`~raytile.common.errors.RunEnded`. The run's
lock orders a patch against the coordinator's end: a patch is either taken
by the coordinator, or seen at its end, or finds the end in the channel.

>>> live = ActiveRun(executor, plan)
>>> live.start()
>>> view = live.view()              # what UDFRun reads
>>> live.patch([{"radius": 5.0}], recompute=False)
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from raytile.common.errors import RunEnded
from raytile.runtime.channel import FINISHED, ChannelReader, SnapshotChannel
from raytile.runtime.coordinator import Coordinator
from raytile.runtime.executor import Executor
from raytile.runtime.param_versions import ParamVersions
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import UDFResults
from raytile.runtime.stream_feed import PartitionInlet
from raytile.udf.base import UDF

__all__ = ["ActiveRun", "RunView"]


class ActiveRun:
    """One run: its parameter versions, its UDFs, its channel and its coordinator (see the module doc).

    ``final_only``: the caller wants the final result alone (``Context.run_udf``); ``detached``: the run
    goes on when the process that started it leaves (kept by the coordinator actor).
    """

    def __init__(self, executor: Executor, plan: RunPlan, progress: ProgressReporter | None = None,
                 span: Any = None, final_only: bool = False, detached: bool = False):
        self.udfs: list[UDF] = list(plan.udfs)
        self.detached = detached
        self.versions = ParamVersions(plan.params, stream=plan.stream is not None)
        self.channel: SnapshotChannel[UDFResults] = SnapshotChannel()
        self._executor, self._plan, self._progress = executor, plan, progress
        self._lock = threading.Lock()  # orders patches, cancels and the coordinator's end
        self._cancelled = False
        self._coordinator = self._coordinator_for(span, final_only)

    def _coordinator_for(self, span: Any, final_only: bool) -> Coordinator:
        return Coordinator(self._executor, self._plan, self.versions, self.channel, self._progress, span=span,
                           final_only=final_only, on_end=self._coordinator_ended)

    @property
    def run_id(self) -> str:
        return self._coordinator.run_id

    @property
    def inlet(self) -> PartitionInlet | None:
        """A stream's partitions as they arrive (fed by the process that reads the stream); None else."""
        return self._coordinator.inlet

    # -- control ---------------------------------------------------------------------
    def start(self) -> "ActiveRun":
        self._coordinator.start()
        return self

    def patch(self, patches: Sequence[dict], recompute: bool) -> None:
        """A live patch: checked and numbered by :attr:`versions` (a bad one raises here), taken by the
        coordinator at its next turn; after the run's last merge, see the module doc (RunEnded once
        the run's end was read)."""
        with self._lock:
            if self.channel.terminal is None:  # the coordinator takes it, in its loop or at its end
                self.versions.patch(patches, recompute)
                self._coordinator.wake()
                return
            if not recompute:  # no partition is left to run with it
                ended = self._cancelled or self.channel.end_read or self.channel.terminal is not FINISHED
                self._refuse_if_over(ended)
                self.versions.patch(patches, recompute)
                return
            self._refuse_if_over(self._cancelled or not self.channel.reopen())
            try:
                self.versions.patch(patches, recompute)
            except BaseException:
                self.channel.end(FINISHED)  # a bad patch changes nothing: the run's end stands
                raise
            self._compute_again()

    def _refuse_if_over(self, over: bool) -> None:
        if over:
            terminal = self.channel.terminal
            how = ("it was cancelled" if self._cancelled else "its end was read" if terminal is FINISHED else
                   f"it failed ({type(terminal).__name__})")
            raise RunEnded(f"run {self.run_id[:8]} has ended ({how}): a patch cannot take effect any more; "
                           "start a new run with the new parameters")

    def _coordinator_ended(self, terminal: Any) -> None:
        """The coordinator's last act (in its thread): end the run, or compute again for a recompute
        patch that came after the loop's last look at the versions."""
        with self._lock:
            if terminal is FINISHED and not self._cancelled and self.versions.recompute_pending:
                self._compute_again()
            else:
                self.channel.end(terminal)

    def _compute_again(self) -> None:
        """A new coordinator computes every partition with the newest parameters (lock held; the
        channel holds no end)."""
        final_only = self._coordinator.final_only
        try:
            self.versions.restart()
            coordinator = self._coordinator_for(None, final_only)
            coordinator.start()
        except BaseException as e:  # noqa: BLE001  (the run's end, for its viewers)
            self.channel.end(e)
            return
        self._coordinator = coordinator

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._coordinator.cancel()
        self._executor.cancel_run(self.run_id)  # an inline task stops at its next tile

    def only_final_result(self) -> None:
        """Publish only the final result from now on (the caller waits for the end anyway)."""
        self._coordinator.only_final_result()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the coordinator's thread to end (and for the thread of a
        coordinator that computes again after it, see :meth:`patch`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            coordinator = self._coordinator
            coordinator.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self._coordinator is coordinator or (deadline is not None and time.monotonic() >= deadline):
                return

    # -- state -------------------------------------------------------------------------
    @property
    def over(self) -> bool:
        """True once the run's end is in the channel."""
        return self.channel.terminal is not None

    @property
    def cancelled(self) -> bool:
        return self._coordinator.cancelled

    @property
    def finished(self) -> bool:
        """True once the coordinator's thread is over and its state released."""
        return self._coordinator.finished

    @property
    def running(self) -> bool:
        return self._coordinator.running

    @property
    def coalesced(self) -> int:
        """Merged partitions not delivered on their own but folded into a later snapshot (latest wins)."""
        return self._coordinator.coalesced

    @property
    def stats(self) -> dict:
        """What the coordinator received and its CPU seconds (see :attr:`Coordinator.stats`)."""
        return self._coordinator.stats

    def view(self) -> "RunView":
        """A viewer of this run in this process (a ``RunSource`` for :class:`~raytile.runtime.run.UDFRun`)."""
        return RunView(self)


class RunView:
    """One viewer's end of a :class:`ActiveRun` in the same process: its own place in the run's channel
    (``outbox``), and the run's controls."""

    def __init__(self, live: ActiveRun):
        self.live = live
        #: Where this viewer takes the run's next result (the newest it has not seen) or its end.
        self.outbox: ChannelReader[UDFResults] = live.channel.reader()

    @property
    def run_id(self) -> str:
        return self.live.run_id

    @property
    def coalesced(self) -> int:
        return self.live.coalesced

    @property
    def finished(self) -> bool:
        return self.live.finished

    @property
    def cancelled(self) -> bool:
        return self.live.cancelled

    @property
    def stats(self) -> dict | None:
        return self.live.stats

    def join(self, timeout: float | None = None) -> None:
        self.live.join(timeout)

    def patch(self, patches: list[dict], recompute: bool) -> None:
        self.live.patch(patches, recompute)

    def cancel(self) -> None:
        self.live.cancel()

    def only_final_result(self) -> None:
        self.live.only_final_result()
