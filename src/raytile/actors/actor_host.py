"""`ActorHost`: the driver's side of ``Context(coordinator="actor")``.

It starts the Context's :class:`~raytile.actors.coordinator_actor.CoordinatorActor`
on the cluster, sends it loaded memory data sets' frames once and each
run's plan (without frames), and gives :class:`~raytile.runtime.run.UDFRun`
a :class:`RemoteRun`: a viewer of the run (a
:class:`~raytile.runtime.active_run.ActiveRun` in the actor) that long-polls the
actor for what is newer than the sequence number it saw. Only snapshots
cross from the cluster to the driver, however many partitions the run merges.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from typing import Any, Callable, Sequence

import ray
from ray import exceptions as rex

from raytile.actors.coordinator_actor import DETACHED_KEEP_S, NAME_PREFIX, NAMESPACE, CoordinatorActor, RunUpdate
from raytile.actors.executor import MERGE_INTERVAL_S, join_ray
from raytile.actors.reply import Reply, ReplyStatus
from raytile.common.errors import ConfigValidationError, CoordinatorDied, ExecutorError
from raytile.io.partition_source import dense_frames
from raytile.runtime.channel import is_terminal
from raytile.runtime.host import RunHost, RunSource
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter, ProgressState, replay_progress
from raytile.runtime.stream_feed import InletClosed, StreamFeeder

__all__ = ["ActorHost", "RemoteRun", "find_run", "list_runs", "POLL_S"]

log = logging.getLogger(__name__)

#: Ray's resource of the head node.
HEAD_NODE_RESOURCE = "node:__internal_head__"
#: The longest one poll of the actor waits for a newer result (then it polls again).
POLL_S = 1.0
#: With a progress reporter, polls return at least this often so that the bar moves.
PROGRESS_POLL_S = 0.25
#: How long what the actor said about its workers is used before asking again (the pool is elastic).
DESCRIBE_TTL_S = 1.0
#: How long creating the actor and starting its workers may take.
START_TIMEOUT_S = 180.0

_RemoteCoordinator: Any = ray.remote(num_cpus=0, max_restarts=0)(CoordinatorActor)


class ActorHost(RunHost):
    """Runs coordinated by a :class:`CoordinatorActor` this process starts (see module doc).

    ``executor_kwargs`` are :meth:`RayExecutor.make`'s (``cpus``, ``gpus``,
    ``max_workers``, ``min_workers``, ``merge_interval_s``); Ray must be
    initialised already.
    """

    coordinator = "actor"

    def __init__(self, executor_kwargs: dict, detached_keep_s: float = DETACHED_KEEP_S):
        self._executor_kwargs = executor_kwargs
        self._keep_s = detached_keep_s
        self._owner = ray.get_runtime_context().get_job_id()
        #: memory data sets shared with the actor, by key: shared again with a replacement actor
        self._datasets: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._closed = False
        self._start_actor()

    def _start_actor(self) -> None:
        self.name = NAME_PREFIX + uuid.uuid4().hex[:12]
        self.actor = _RemoteCoordinator.options(
            name=self.name, namespace=NAMESPACE, lifetime="detached",
            resources={HEAD_NODE_RESOURCE: 0.001},  # on the head node, like a driver: not among busy workers
        ).remote(self._executor_kwargs, self._owner, self._keep_s)
        self._description: dict | None = None
        self._described_at = 0.0

    def _ask(self, method: str, *args: Any, what: str) -> Any:
        """Call the actor's ``method``; if the actor died, start a new one (sharing the loaded memory
        data sets with it again) and call that."""
        if self._closed:
            raise ExecutorError("this Context is closed")
        try:
            return _call(getattr(self.actor, method).remote(*args), START_TIMEOUT_S, what)
        except CoordinatorDied:
            log.warning("the coordinator actor %s died; starting a new one", self.name)
            self._start_actor()
            for key, dataset in list(self._datasets.items()):
                _call(self.actor.share_dataset.remote(key, dense_frames(dataset)), START_TIMEOUT_S,
                      "share a data set")
            return _call(getattr(self.actor, method).remote(*args), START_TIMEOUT_S, what)

    @classmethod
    def make(cls, cpus: int | None = None, gpus: int | None = None, address: str | None = None,
             max_workers: int | None = None, min_workers: int | None = None,
             merge_interval_s: float | None = MERGE_INTERVAL_S, detached_keep_s: float = DETACHED_KEEP_S,
             **init_kwargs: Any) -> "ActorHost":
        """Join or start Ray as :meth:`RayExecutor.make` does, then start the coordinator actor
        (its workers start with the first data set). ``detached_keep_s``: how long a detached run's
        result is kept after it ended, for viewers to attach; the actor exits once its driver is gone
        and no result is kept any more."""
        if isinstance(detached_keep_s, bool) or not isinstance(detached_keep_s, (int, float)) \
                or not detached_keep_s >= 0:
            raise ConfigValidationError(f"detached_keep_s must be a number of seconds >= 0, got {detached_keep_s!r}")
        join_ray(address, cpus, gpus, max_workers, min_workers, init_kwargs)
        return cls({"cpus": cpus, "gpus": gpus, "max_workers": max_workers, "min_workers": min_workers,
                    "merge_interval_s": merge_interval_s}, float(detached_keep_s))

    def _describe(self) -> dict:
        """The workers as they were at most ``DESCRIBE_TTL_S`` ago (started with the first call)."""
        now = time.monotonic()
        if self._description is None or now - self._described_at > DESCRIBE_TTL_S:
            self._description = self._ask("describe", what="start its workers")
            self._described_at = now
        return self._description

    @property
    def num_workers(self) -> int:
        return int(self._describe()["num_workers"])

    @property
    def device_classes(self) -> frozenset:
        return frozenset(self._describe()["device_classes"])

    @property
    def workers(self) -> list[dict]:
        """What the workers said about themselves when they started (name, kind, pid, node)."""
        return list(self._describe()["workers"])

    def run_function(self, fn: Callable, *args: Any) -> Any:
        name = getattr(fn, "__name__", fn)
        reply: Reply = self._ask("run_function", fn, args, what=f"run {name}")
        return reply.unwrap(f"run_function({name})")

    def prepare_dataset(self, dataset: Any) -> None:
        """Send a memory data set's frames to the actor once; it owns their object-store copy (so a
        detached run keeps them when this process exits), released when ``dataset`` goes."""
        frames = dense_frames(dataset)
        if not frames:
            return
        self._ask("share_dataset", id(dataset), frames, what="share a data set")
        self._datasets[id(dataset)] = dataset
        # not at interpreter exit: Ray may have shut down by then (a call would start another Ray), and
        # the actor forgets the frames itself when this driver is gone
        weakref.finalize(dataset, _release, weakref.ref(self), id(dataset)).atexit = False

    def start(self, plan: RunPlan, progress: ProgressReporter | None, final_only: bool,
              detached: bool, span: Any = None) -> RunSource:
        if plan.stream is not None and detached:
            raise ConfigValidationError("detached=True is not possible for a stream: its frames come from this "
                                        "process, and the run ends when it does")
        reply: Reply = self._ask("start", plan.without_frames(), final_only, detached, progress is not None,
                                 what="start a run")
        run_id = reply.unwrap("start a run")
        if span is not None:
            span.end()  # planning ends here; the run itself is traced in the coordinator actor
        feeder = _feed_stream(self.actor, run_id, plan.dataset) if plan.stream is not None else None
        return RemoteRun(self.actor, run_id, progress, owner=True, feeder=feeder)

    def attach(self, run_id: str) -> tuple[RunSource, Sequence[Any]]:
        return attach_run(run_id, self.actor)

    def list_runs(self) -> list[dict]:
        return list_runs()

    def close(self) -> None:
        """Cancel this Context's runs (not the detached ones) and let the actor end."""
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except rex.RayActorError:  # it exited already
            pass
        except Exception as e:  # noqa: BLE001
            log.debug("closing coordinator actor %s: %s", self.name, e)


def _feed_stream(actor: Any, run_id: str, dataset: Any) -> StreamFeeder:
    """Read a stream in a thread of this process (its source lives here) and hand each partition to
    the run's coordinator actor: one ``ray.put`` of its frames here, their object ref to the actor,
    which waits for room in the run's inlet before it answers (backpressure reaches the source)."""

    def deliver(idx: int, ref: Any) -> None:
        try:
            accepted = ray.get(actor.feed.remote(run_id, idx, [ref]))  # in a list: the ref, not the frames
        except rex.RayActorError as e:
            raise InletClosed(f"the coordinator actor died ({type(e).__name__})") from None
        if not accepted:
            raise InletClosed("the run is over")

    def finish(error: BaseException | None) -> None:
        try:
            actor.end_stream.remote(run_id, error)
        except Exception as e:  # noqa: BLE001  (the actor is gone: the run is lost with it)
            log.debug("end_stream of run %s: %s", run_id[:8], e)

    feeder = StreamFeeder(dataset, deliver, finish, ray.put, name=f"raytile-stream-{run_id[:8]}")
    feeder.start()
    return feeder


def attach_run(run_id: str, actor: Any = None) -> tuple["RemoteRun", Sequence[Any]]:
    """A viewer of run ``run_id``: on ``actor`` if it has it, else on whichever coordinator actor
    of the cluster does."""
    if not isinstance(run_id, str) or not run_id:
        raise ExecutorError(f"run_id must be a run's id (UDFRun.run_id), got {run_id!r}")
    host = actor if actor is not None and _has_run(actor, run_id) else find_run(run_id)
    reply: Reply = ray.get(host.attach.remote(run_id))
    udfs = reply.unwrap(f"attach to run {run_id}")
    return RemoteRun(host, run_id, None, owner=False), udfs


def list_runs() -> list[dict]:
    """The runs every coordinator actor of the cluster holds: ``run_id``, ``udfs`` (class names),
    ``detached``, ``over``, ``viewers`` and ``coordinator`` (the actor's name)."""
    found = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry.get("name", "")
        if entry.get("namespace") != NAMESPACE or not name.startswith(NAME_PREFIX):
            continue
        try:
            runs = ray.get(ray.get_actor(name, namespace=NAMESPACE).runs.remote(), timeout=10)
        except Exception as e:  # noqa: BLE001  (an actor that is exiting)
            log.debug("listing the runs of %s: %s", name, e)
            continue
        found += [{**run, "coordinator": name} for run in runs]
    return found


def _has_run(actor: Any, run_id: str) -> bool:
    try:
        return bool(ray.get(actor.has_run.remote(run_id), timeout=10))
    except (rex.RayActorError, rex.GetTimeoutError):
        return False


def find_run(run_id: str) -> Any:
    """The coordinator actor of the cluster that has run ``run_id``; ExecutorError if none has."""
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") != NAMESPACE or not entry.get("name", "").startswith(NAME_PREFIX):
            continue
        try:
            actor = ray.get_actor(entry["name"], namespace=NAMESPACE)
        except ValueError:  # it exited meanwhile
            continue
        if _has_run(actor, run_id):
            return actor
    raise ExecutorError(
        f"no run {run_id!r} on this cluster: it ended and its result was dropped, or it was not started "
        "with coordinator='actor' (runs coordinated in a driver cannot be attached)")


def _call(ref: Any, timeout: float, what: str) -> Any:
    try:
        return ray.get(ref, timeout=timeout)
    except rex.GetTimeoutError:
        raise ExecutorError(f"the coordinator actor did not {what} within {timeout:.0f} s") from None
    except rex.RayActorError as e:
        raise CoordinatorDied(f"the coordinator actor died before it could {what} ({type(e).__name__})") from None


def _release(host_ref: "weakref.ref[ActorHost]", key: int) -> None:
    host = host_ref()
    if host is None or host._closed or not ray.is_initialized():  # no call may start Ray again
        return
    try:
        host.actor.release_dataset.remote(key)
    except Exception:  # noqa: BLE001  (the actor or this process is shutting down)
        pass


class RemoteRun:
    """One viewer's end of a run coordinated by a :class:`CoordinatorActor` (a ``RunSource``)."""

    def __init__(self, actor: Any, run_id: str, progress: ProgressReporter | None, owner: bool,
                 feeder: StreamFeeder | None = None):
        """``feeder``: the thread that reads the run's stream in this process (stopped by a cancel)."""
        self._feeder = feeder
        self._actor = actor
        self._run_id = run_id
        self._progress = progress
        self._seen = ProgressState()
        self._seq = 0
        self._end: Any = None  #: the run's end, when it came with the final snapshot
        self._coalesced = 0
        self.owner = owner
        self.outbox = _RemoteQueue(self)
        weakref.finalize(self, _leave, actor, run_id, self.outbox.left).atexit = False  # see prepare_dataset

    @property
    def run_id(self) -> str:
        return self._run_id

    def _status(self) -> dict:
        return ray.get(self._actor.status.remote(self._run_id))

    @property
    def coalesced(self) -> int:
        """Partitions folded into later snapshots, as of the newest snapshot this viewer received (no
        round trip: final once the run's end came)."""
        return self._coalesced

    @property
    def finished(self) -> bool:
        return bool(self._status()["finished"])

    @property
    def stats(self) -> dict | None:
        """What the run's coordinator received and its CPU seconds (see ``Coordinator.stats``)."""
        return ray.get(self._actor.run_stats.remote(self._run_id))

    def join(self, timeout: float | None = None) -> None:
        try:
            ray.get(self._actor.join.remote(self._run_id, 5.0 if timeout is None else timeout))
        except rex.RayActorError:
            pass

    def patch(self, patches: list[dict], recompute: bool) -> None:
        reply: Reply = ray.get(self._actor.patch.remote(self._run_id, patches, recompute))
        reply.unwrap(f"patch run {self._run_id[:8]}")
        self._end = None  # the end that came with the final snapshot may be taken back (a late recompute)

    def cancel(self) -> None:
        if self._feeder is not None:
            self._feeder.stop()  # the stream's source is pulled no more from now on
        try:
            ray.get(self._actor.cancel.remote(self._run_id))
        except rex.RayActorError:
            pass

    def only_final_result(self) -> None:
        self._actor.only_final_result.remote(self._run_id)

    def _poll(self, timeout: float) -> Any:
        """The run's next item (None if none came within ``timeout``); moves the progress bar."""
        if self._end is not None:
            return self._end
        wait = min(timeout, PROGRESS_POLL_S) if self._progress is not None else timeout
        try:
            reply: Reply = ray.get(self._actor.next.remote(self._run_id, self._seq, wait))
        except rex.RayActorError as e:
            reply = Reply.error(CoordinatorDied(
                f"the coordinator actor of run {self._run_id[:8]} died ({type(e).__name__}); the run is lost, "
                "the Context starts a new actor for its next run"))
        if reply.status is ReplyStatus.ERROR:  # the run's end, as the viewer's next item
            return reply.payload
        update: RunUpdate = reply.unwrap(f"the next result of run {self._run_id[:8]}")
        self._end = update.end
        if self._progress is not None:
            replay_progress(self._progress, self._run_id, self._seen, update.progress)
            self._seen = update.progress
        if reply.status is ReplyStatus.WAIT:
            return None
        self._seq = update.seq
        self._coalesced = update.coalesced
        return update.item


def _leave(actor: Any, run_id: str, left: list) -> None:
    if left or not ray.is_initialized():  # after Ray's shutdown a call would start another Ray
        return
    left.append(True)
    try:
        actor.leave.remote(run_id)
    except Exception:  # noqa: BLE001  (the actor or this process is shutting down)
        pass


class _RemoteQueue:
    """``take``/``take_nowait`` over :meth:`RemoteRun._poll` (a ``ResultQueue``)."""

    def __init__(self, run: RemoteRun):
        self._run = weakref.ref(run)
        self._actor = run._actor
        self._run_id = run.run_id
        self.left: list = []

    def take(self, timeout: float | None = None) -> Any:
        run = self._run()
        if run is None:
            raise ExecutorError("the run handle is gone")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            item = run._poll(max(0.0, remaining))
            if item is not None:
                if is_terminal(item):
                    _leave(self._actor, self._run_id, self.left)
                return item
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no result arrived in time")

    def take_nowait(self) -> Any:
        try:
            return self.take(timeout=0)
        except TimeoutError:
            return None

