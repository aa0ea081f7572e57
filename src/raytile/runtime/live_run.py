"""`LiveRun`: one run, wherever it is hosted, and `RunView`, a viewer of it in the same process.

Design. Every run has the same three parts, whoever started it and
whoever watches it:

- its parameter versions (:class:`~raytile.runtime.param_versions.ParamVersions`):
  a live patch is checked, applied and numbered there, once;
- its UDF set (what it computes; what a viewer that attaches gets);
- its viewers' latest-wins channel (:class:`~raytile.runtime.channel.SnapshotChannel`):
  the newest snapshot and the run's end, numbered, read by any number of
  viewers, each at its own pace.

A ``LiveRun`` owns these three and the
:class:`~raytile.runtime.coordinator.Coordinator` thread that works on them
(dispatches with the newest version, publishes into the channel). Its id is
the plan's run id, the one id the run has everywhere. The hosts differ only
in where the viewers are, never in what a run is:

- in the driver (``coordinator="driver"``, ``runtime/host.py``), a viewer
  is a :class:`RunView` of the run in the same process;
- in the coordinator actor (``coordinator="actor"``,
  ``actors/coordinator_actor.py``), the actor keeps its ``LiveRun`` objects by
  id; a viewer in another process (``actors/actor_host.py``'s ``RemoteRun``)
  asks the actor for what is newer than the sequence number it saw, which
  waits on the channel (a long poll: no thread per run);
- behind Serve, the replica's Context coordinates on the actor, so a served
  run is a ``LiveRun`` there too: its id is the id ``raytile runs`` lists and
  ``Context.attach`` takes, and the replica is one more viewer of it.

>>> live = LiveRun(executor, plan)
>>> live.start()
>>> view = live.view()              # what UDFRun reads
>>> live.patch([{"radius": 5.0}], recompute=False)
"""

from __future__ import annotations

from typing import Any, Sequence

from raytile.runtime.channel import ChannelReader, SnapshotChannel
from raytile.runtime.coordinator import Coordinator
from raytile.runtime.executor import Executor
from raytile.runtime.param_versions import ParamVersions
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.stream_feed import PartitionInlet
from raytile.udf.base import UDF

__all__ = ["LiveRun", "RunView"]


class LiveRun:
    """One run: its parameter versions, its UDFs, its channel and its coordinator (see the module doc).

    ``final_only``: the caller wants the final result alone (``Context.run_udf``); ``detached``: the run
    goes on when the process that started it leaves (kept by the coordinator actor).
    """

    def __init__(self, executor: Executor, plan: RunPlan, progress: ProgressReporter | None = None,
                 span: Any = None, final_only: bool = False, detached: bool = False):
        self.udfs: list[UDF] = list(plan.udfs)
        self.detached = detached
        self.versions = ParamVersions(plan.params, stream=plan.stream is not None)
        self.channel = SnapshotChannel()
        self._executor = executor
        self._coordinator = Coordinator(executor, plan, self.versions, self.channel, progress, span=span,
                                        final_only=final_only)

    @property
    def run_id(self) -> str:
        return self._coordinator.run_id

    @property
    def inlet(self) -> PartitionInlet | None:
        """A stream's partitions as they arrive (fed by the process that reads the stream); None else."""
        return self._coordinator.inlet

    # -- control ---------------------------------------------------------------------
    def start(self) -> "LiveRun":
        self._coordinator.start()
        return self

    def patch(self, patches: Sequence[dict], recompute: bool) -> None:
        """A live patch: checked and numbered by :attr:`versions` (a bad one raises here), taken by the
        coordinator at its next turn."""
        self.versions.patch(patches, recompute)
        self._coordinator.wake()

    def cancel(self) -> None:
        self._coordinator.cancel()
        self._executor.cancel_run(self.run_id)  # an inline task stops at its next tile

    def only_final_result(self) -> None:
        """Publish only the final result from now on (the caller waits for the end anyway)."""
        self._coordinator.only_final_result()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the coordinator's thread to end."""
        self._coordinator.join(timeout)

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
    """One viewer's end of a :class:`LiveRun` in the same process: its own place in the run's channel
    (``outbox``), and the run's controls."""

    def __init__(self, live: LiveRun):
        self.live = live
        #: Where this viewer takes the run's next result (the newest it has not seen) or its end.
        self.outbox: ChannelReader = live.channel.reader()

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
