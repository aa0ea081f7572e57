"""`RayExecutor`: runs partition tasks on long-lived `WorkerActor`s.

One actor per CPU slot (``num_cpus=1``) and one per GPU (``num_gpus=1``),
created once per Context and reused by every run (no per-run start-up).
The Context does not wait for them to start: its first run begins on the
first worker that answers (``Context()`` was ~4 s slower than ``ray.init``
alone while it waited for every actor to import raytile).
The coordinator keeps ``InFlightLimit.per_worker`` (2) tasks per actor in flight,
so an actor's next partition is already queued when the current one ends.
Tasks for in-memory data go to a worker on the node whose object store holds
their frames while one has room (``WorkerPool.pick``). Tasks travel as one
packed message with the values they share shipped once per actor
(:mod:`raytile.actors.cache`); each task's future wakes the run's
coordinator when it finishes (:meth:`RayExecutor.wait`), so nothing polls Ray.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent import futures
from typing import Any, Callable, Sequence, cast

import numpy as np
import ray
from ray import exceptions as rex

from raytile.actors.cache import pack
from raytile.actors.frame_slab import FrameSlab, SlabFrames
from raytile.actors.shared_frames import SharedFrames
from raytile.actors.task_message import TaskMessage
from raytile.actors.progress import ProgressActor
from raytile.actors.ray_start import start_ray
from raytile.actors.reply import Reply, ReplyStatus
from raytile.actors.pool import REFRESH_S, Slot, WorkerPool
from raytile.common.errors import ConfigValidationError, ExecutorError
from raytile.io.dataset import FrameDelivery
from raytile.runtime.dispatch_policy import DISPATCH_POLICY, DispatchPolicy
from raytile.runtime.executor import Executor, NoWorkerReady, ProgressSink, TaskHandle, WorkerLost
from raytile.runtime.params import PartitionResult, PartitionTask
from raytile.runtime import tracing

__all__ = ["RayExecutor", "ParamsHandle", "join_ray"]

log = logging.getLogger(__name__)

#: Errors that mean the actor (or its process, or its node) is gone: retry the task elsewhere.
_LOST = tuple(
    getattr(rex, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                              "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError",
                              "OwnerDiedError", "ObjectLostError")
    if hasattr(rex, n)
)

#: Run parameters that pickle to at most this many bytes travel inside the first task each actor gets
#: (no object store round trip); larger ones are put into the object store once.
INLINE_PARAMS_BYTES = 64 * 1024
#: By default workers send their merged results at most this often (seconds).
MERGE_INTERVAL_S = 0.1


class ParamsHandle:
    """The driver's handle of one params version: its cache key ``(run_id, version)`` and what
    ships it to an actor the first time, the packed params (small ones) or their object ref."""

    def __init__(self, payload: Any, run_id: str, version: int):
        self.payload = payload
        self.run_id = run_id
        self.version = version

    @property
    def key(self) -> tuple[str, int]:
        return (self.run_id, self.version)


_RemoteProgress: Any = ray.remote(num_cpus=0)(ProgressActor)


class _RayHandle(TaskHandle):
    """A submitted task: its object ref, and a future of it whose callback wakes the run's coordinator."""

    def __init__(self, task, version, ref, slot: Slot, actor, run_id: str, sink, expected=()):
        super().__init__(task, version, expected)
        self.ref = ref
        self.future = ref.future()
        self.slot = slot
        self.actor = actor
        self.run_id = run_id
        self.sink = sink
        self.settled = False


@dataclasses.dataclass
class _ProgressPoll:
    """A pending ``ProgressActor.take`` of one run: its future, where its frames go, which actor."""

    future: Any
    sink: ProgressSink
    actor: Any


class RayExecutor(Executor):
    """Worker actors on a local or remote Ray cluster. Build it with :meth:`make`."""

    #: How many tasks go out and to which workers (see :mod:`raytile.runtime.dispatch_policy`).
    policy: DispatchPolicy = DISPATCH_POLICY

    def __init__(self, cpus: int | None = None, gpus: int | None = None, cpu_share: float = 1.0,
                 max_workers: int | None = None, start_timeout: float = 120.0,
                 merge_interval_s: float | None = MERGE_INTERVAL_S):
        """Worker actors: ``cpus`` CPU and ``gpus`` GPU actors, or with both None one per CPU and GPU
        of every node, following the cluster as nodes join and leave (at most ``max_workers``).

        Workers merge the results of the partitions they run and send them at
        most every ``merge_interval_s`` seconds (None: each partition's result
        goes to the coordinator; see :mod:`raytile.runtime.segments`).

        Returns once the actors are created: they start (a process each, importing raytile: seconds)
        while the caller goes on, and a run starts on the first that is ready. ``start_timeout`` bounds
        the wait of :attr:`workers` and :meth:`run_function` for them."""
        fixed = None if cpus is None and gpus is None else {"cpu": int(cpus or 0), "cuda": int(gpus or 0)}
        if fixed is not None and sum(fixed.values()) <= 0:
            raise ExecutorError("RayExecutor needs at least one CPU or GPU worker")
        self._lock = threading.RLock()
        self._wakeups: dict[str, threading.Event] = {}
        self._held: dict[str, dict[str, set[int]]] = {}  # run_id -> worker name -> partitions held merged
        self.merge_interval_s = merge_interval_s
        self._closed = False
        self.pool = WorkerPool(fixed, cpu_share, max_workers, on_change=self._wake_all,
                               on_nodes_lost=self._renew_shared_frames, policy=self.policy)
        # started with the workers: creating it lazily would cost a process start in the first run with progress
        self._progress_actor = _RemoteProgress.remote()
        self._progress_started: Any = self._progress_actor.forget.remote("").future()  # done once it runs
        self._progress_polls: dict[str, _ProgressPoll] = {}  # run_id -> its pending poll
        self.shared = SharedFrames(ray.put, node=_this_node())
        self.slab = FrameSlab()  # a stream's partitions, for the workers of this node
        self._fixed = fixed
        self._start_timeout = start_timeout
        self._started = False  # the first actors were waited for (see _await_started)
        self.pool.refresh()  # creates the actors; they start in the background (see raytile.actors.pool)
        self._monitor = threading.Thread(target=self._watch_cluster, name="raytile-pool", daemon=True)
        self._monitor.start()

    # -- the pool ----------------------------------------------------------------
    @property
    def num_workers(self) -> int:  # type: ignore[override]
        return max(1, len(self.pool.slots))

    def _await_started(self) -> None:
        """Wait (once, at most ``start_timeout``) for the actors the Context was made with, for callers
        that report on the workers or run on one of them now. Runs do not wait here: they start on the
        first worker that is ready (see :meth:`wait`)."""
        if not self._started:
            self.pool.wait_ready(self._start_timeout)
            self._started = True
        self._raise_startup_error()
        if not self.pool.ready:
            raise ExecutorError(
                f"the Ray cluster could not start {'its' if self._fixed is None else self._fixed} "
                f"worker actors within {self._start_timeout:.0f} s (cluster resources: {ray.cluster_resources()})")

    def _raise_startup_error(self) -> None:
        """Raise why the worker actors failed to start, if all did (the pool then starts no more)."""
        error = self.pool.startup_error
        if error is not None:
            raise ExecutorError(f"the worker actors failed to start:\n{error}")

    @property
    def max_in_flight(self) -> int:  # type: ignore[override]
        return self.policy.in_flight.run_limit(len(self.pool.ready))

    @property
    def full_in_flight(self) -> int:
        return self.policy.in_flight.run_limit(len(self.pool.slots))

    @property
    def device_classes(self) -> frozenset:  # type: ignore[override]
        return self.pool.kinds()

    @property
    def workers(self) -> list[dict]:
        """What the ready workers said about themselves (name, kind, pid, host, node, caches); the first
        time, once the actors the Context was made with started."""
        self._await_started()
        return [s.info for s in self.pool.ready]

    def _watch_cluster(self) -> None:
        """Refresh the pool every ``REFRESH_S`` (new nodes, lost nodes, actors that started), and promote
        a starting actor as soon as its ping is answered (the first run waits for it)."""
        next_refresh = time.monotonic()
        while not self._closed:
            if self.pool.answered.wait(max(0.0, next_refresh - time.monotonic())):
                self.pool.answered.clear()
                self.pool.promote()
            if time.monotonic() >= next_refresh:
                try:
                    self.pool.refresh()
                except Exception as e:  # noqa: BLE001  (the cluster is unreachable for a moment)
                    log.debug("pool refresh failed: %s", e)
                next_refresh = time.monotonic() + REFRESH_S

    def _wake_all(self) -> None:
        """The ready workers changed: every run looks again (dispatches to new workers)."""
        with self._lock:
            wakeups = list(self._wakeups.values())
        for w in wakeups:
            w.set()

    @classmethod
    def make(cls, cpus: int | None = None, gpus: int | None = None, address: str | None = None,
             max_workers: int | None = None, min_workers: int | None = None,
             merge_interval_s: float | None = MERGE_INTERVAL_S, **init_kwargs: Any) -> "RayExecutor":
        """Join or start Ray, then start the worker actors.

        ``address``: None joins the Ray this machine runs or starts one;
        ``"local"`` always starts a private instance (with ``cpus``/``gpus``);
        ``"auto"``, ``"host:6379"`` or ``"ray://host:10001"`` (Ray Client,
        ``pip install "raytile[client]"``) join a running cluster. If Ray is
        already initialised in this process it is used as it is.

        With ``cpus``/``gpus`` the Context has exactly that many CPU and GPU
        actors; without, one per CPU and per GPU of every node, following the
        cluster as nodes join and leave, at most ``max_workers``.
        ``min_workers`` asks the cluster's autoscaler for that many CPUs.
        ``merge_interval_s``: see :class:`RayExecutor`.
        """
        if "detached_keep_s" in init_kwargs:
            raise ConfigValidationError("detached_keep_s is for runs coordinated by an actor: "
                                        "use Context(coordinator='actor', detached_keep_s=...)")
        join_ray(address, cpus, gpus, max_workers, min_workers, init_kwargs)
        total = ray.cluster_resources()
        n_cpu = int(total.get("CPU", 0)) if cpus is None else cpus
        if max_workers is not None:
            n_cpu = min(n_cpu, max_workers)
        free = ray.available_resources().get("CPU", 0.0)
        share = 1.0
        if n_cpu > free + 1e-9:
            log.warning("only %s of %s CPUs are free in the Ray cluster (another Context holds them); "
                        "this Context's %d CPU workers share CPUs", free, total.get("CPU", 0), n_cpu)
            share = 0.0
        return cls(cpus, gpus, cpu_share=share, max_workers=max_workers, merge_interval_s=merge_interval_s)

    # -- params and data -------------------------------------------------------
    def put_params(self, params: Any) -> Any:
        packed = pack(params)
        small = packed is not None and len(packed) <= INLINE_PARAMS_BYTES
        payload = packed if small else ray.put(params)
        return ParamsHandle(payload, params.run_id, params.version)

    def prepare_dataset(self, dataset: Any) -> None:
        """Put an in-memory data set's partitions into the object store, once per DataSet object.

        The copy lives as long as the DataSet (see :mod:`raytile.actors.shared_frames`).
        """
        from raytile.io.formats.memory import dense_frames

        self._forget_released()
        frames = dense_frames(dataset)
        if frames:
            self.shared.share(dataset, frames)

    def _renew_shared_frames(self, nodes: set[str]) -> None:
        """Workers on ``nodes`` were retired, their nodes gone: in-memory data sets are put into the object
        store again, so that no worker pulls a copy Ray still lists on a lost node (see
        :meth:`SharedFrames.put_again`). Tasks submitted from now on carry the new refs."""
        t0 = time.monotonic()
        count = self.shared.put_again(ray.get)
        if count:
            log.warning("node(s) %s lost: %d in-memory partitions put into the object store again (%.2f s)",
                        ", ".join(n[:12] for n in sorted(nodes)), count, time.monotonic() - t0)

    def _forget_released(self) -> None:
        """Tell the workers to drop their views of released data sets' frames (which pin them)."""
        keys = self.shared.take_released()
        if not keys:
            return
        for slot in self.pool.slots:
            held = slot.ledgers["data"].forget_all(keys)
            if held:
                try:
                    slot.actor.forget_values.remote("data", held)
                except Exception as e:  # its actor is gone
                    log.debug("forget_values on %s: %s", slot.name, e)

    def share_frames(self, frames: Any) -> Any:
        """A stream partition's frames as its task carries them: copied into a reused shared-memory
        slot of this node (:mod:`raytile.actors.frame_slab`), or when none is free, put into the object
        store (one ``ray.put``). Either way the worker reads them zero-copy and does not cache them."""
        handle = self.slab.share(frames) if self.shared.node is not None else None
        return handle if handle is not None else ray.put(frames)

    def stream_buffer(self, shape: tuple, dtype: Any) -> np.ndarray:
        """An array in a free slot of this node's slab (see :meth:`share_frames`), else a new one."""
        buf = self.slab.allocate(shape, dtype) if self.shared.node is not None else None
        return buf if buf is not None else np.empty(shape, dtype=dtype)

    def _frames_for(self, frames: Any, slot: Slot) -> Any:
        """A stream partition's frames as ``slot``'s worker can read them: a slab slot only on this
        node; for a worker elsewhere they go into the object store."""
        if isinstance(frames, SlabFrames) and slot.node_id != self.shared.node:
            return ray.put(self.slab.array(frames))
        return frames

    def _strip(self, task: PartitionTask):
        """The task to send and the ref of its frames (SHARED in-memory frames), else None."""
        part = task.partition
        if part.frame_delivery is not FrameDelivery.SHARED:  # read where it runs, or carried in the task
            return task, None
        ref = self.shared.ref(task.dataset_id, part.idx)
        if ref is None:
            raise ExecutorError(f"{task.describe()}: its data set was not shared with the workers "
                                "(prepare_dataset was not called for it, or it was released)")
        return dataclasses.replace(task, partition=part.without_frames()), ref

    # -- tasks -----------------------------------------------------------------
    def submit(self, task: PartitionTask, params_handle: Any, version: int,
               progress: ProgressSink | None = None) -> TaskHandle:
        if self._closed:
            raise ExecutorError("this Context is closed")
        self._raise_startup_error()
        frames = task.frames  # a stream partition's object ref: an argument of this task alone
        send, data_ref = self._strip(task if frames is None else dataclasses.replace(task, frames=None))
        data_key = None if data_ref is None else data_ref.hex()
        message = TaskMessage(send, params_handle.key, data_key).packed()
        progress_actor = None
        if progress is not None:
            progress_actor = self._progress(params_handle.run_id, progress)
        with self._lock:
            node = self.policy.locality.home_node(data_ref is not None or isinstance(frames, SlabFrames),
                                                  self.shared.node)
            slot = self.pool.pick(task.device_class, params_handle.run_id, task.idx, node=node)
            if slot is None:
                raise NoWorkerReady(f"no {task.device_class} worker is ready for {task.describe()}")
            slot.in_flight += 1
            actor = slot.actor
            shipped = {}  # what this actor gets for the first time (see raytile.actors.cache)
            if slot.ledgers["params"].ship(params_handle.key):
                shipped["params"] = params_handle.payload
            if data_key is not None and slot.ledgers["data"].ship(data_key):
                shipped["data"] = data_ref
        ref = actor.run_task.remote(message, shipped or None, progress_actor, self._frames_for(frames, slot))
        handle = _RayHandle(task, version, ref, slot, actor, params_handle.run_id, progress)
        self._ring_when_done(handle.future, params_handle.run_id)
        return handle

    def start_run(self, run_id: str, wakeup: threading.Event) -> None:
        with self._lock:
            self._wakeups[run_id] = wakeup

    def _ring_when_done(self, future, run_id: str) -> None:
        """Set the run's wakeup event when ``future`` is done (from Ray's callback thread)."""
        wakeup = self._wakeups.get(run_id)
        if wakeup is not None:
            future.add_done_callback(lambda _f: wakeup.set())

    def _take_progress(self, run_id: str, sink: ProgressSink) -> _ProgressPoll:
        """A long-poll of the run's progress counts, as a future that wakes the run when it returns."""
        actor = self._progress_actor
        future = actor.take.remote(run_id, 1.0).future()
        self._ring_when_done(future, run_id)
        return _ProgressPoll(future, sink, actor)

    def _progress(self, run_id: str, sink: ProgressSink):
        if not self._progress_started.done():
            # the first run with progress waits for the progress actor to run (it started with the
            # workers): tile reports sent to it before then would all arrive as one count
            try:
                self._progress_started.result(timeout=self._start_timeout)
            except futures.TimeoutError:
                raise ExecutorError(f"the progress actor did not start within {self._start_timeout:.0f} s") from None
            except _LOST:
                self._replace_progress_actor(self._progress_actor)
        with self._lock:
            if run_id not in self._progress_polls:
                self._progress_polls[run_id] = self._take_progress(run_id, sink)
            return self._progress_actor

    def _replace_progress_actor(self, dead: Any) -> None:
        """Start a new progress actor if ``dead`` is still the current one (tasks from now on use it)."""
        with self._lock:
            if self._progress_actor is dead and not self._closed:
                log.warning("the progress actor died; starting a replacement")
                self._progress_actor = _RemoteProgress.remote()

    def _settle(self, handle: _RayHandle) -> None:
        with self._lock:
            if not handle.settled:
                handle.settled = True
                if handle.slot.actor is handle.actor:
                    handle.slot.in_flight = max(0, handle.slot.in_flight - 1)

    def wait(self, run_id: str, handles: Sequence[TaskHandle], timeout: float) -> list[TaskHandle]:
        """The finished handles, and those whose worker the pool retired (their tasks are lost); blocks on
        the run's wakeup event (no polling of Ray) if there are none.

        Task futures and progress polls set the event from Ray's callback
        thread, the coordinator sets it on a patch or a cancel. Only the
        coordinator clears it. Progress that arrived is delivered here, in
        the coordinator's thread.
        """
        if not handles:  # nothing in flight (no worker ready): sleep until the pool or the run changes
            self._raise_startup_error()
            wakeup = self._wakeups.get(run_id)
            if wakeup is not None:
                wakeup.wait(timeout)
            return []
        ray_handles = cast(Sequence[_RayHandle], handles)
        wakeup = self._wakeups.get(run_id)
        if wakeup is None:  # a caller that did not start_run: wait on the task futures alone
            futures.wait([h.future for h in ray_handles], timeout, return_when=futures.FIRST_COMPLETED)
            return self._collect(handles, run_id)
        # The coordinator clears ``wakeup`` before it looks at its inputs; clearing it here too would
        # lose a patch or cancel that arrived in between (seen as a 0.2 s delay).
        done = self._collect(handles, run_id)
        if done:
            return done
        wakeup.wait(timeout)
        return self._collect(handles, run_id)

    def _collect(self, handles: Sequence[TaskHandle], run_id: str) -> list[TaskHandle]:
        with self._lock:
            poll = self._progress_polls.get(run_id)
        if poll is not None and poll.future.done():
            self._deliver_progress(run_id, poll)
        return [h for h in cast(Sequence[_RayHandle], handles) if h.future.done() or h.slot.dead]

    def _deliver_progress(self, run_id: str, poll: _ProgressPoll) -> None:
        """Hand a finished poll's frames to the run's sink and start the next poll.

        A poll that failed because the progress actor died replaces the
        actor first, so the next poll waits on a live one (re-polling the
        dead one returned at once, and the coordinator spun a CPU core).
        """
        try:
            frames = poll.future.result()
        except _LOST:
            frames = 0
            self._replace_progress_actor(poll.actor)
        with self._lock:
            if self._progress_polls.get(run_id) is not poll:
                return
            self._progress_polls[run_id] = self._take_progress(run_id, poll.sink)
        if frames:
            poll.sink(run_id, frames)

    def finish_run(self, run_id: str) -> None:
        """Deliver the run's last progress counts and forget its progress poll."""
        with self._lock:
            self._wakeups.pop(run_id, None)
            self._held.pop(run_id, None)
            poll = self._progress_polls.pop(run_id, None)
            actor = self._progress_actor
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

    def result(self, handle: TaskHandle) -> list[PartitionResult]:
        assert isinstance(handle, _RayHandle)
        self._settle(handle)
        if handle.slot.dead and not handle.future.done():
            # The pool retired its worker (its node left the cluster, or it died): the task is lost now.
            # Ray fails it only once it declares the node dead (its health checks: ~30 s by default, and a
            # run after a node loss waited that long for tasks it had sent to the lost node's workers).
            raise WorkerLost(f"worker {handle.slot.name} was retired while running {handle.describe()}",
                             held=self._held_by(handle, clear=True))
        try:
            reply: Reply = handle.future.result()
        except _LOST as e:
            self._replace(handle)
            raise WorkerLost(f"worker {handle.slot.name} died running {handle.describe()}: {type(e).__name__}",
                             held=self._held_by(handle, clear=True)) from e
        except rex.RayTaskError as e:  # not a UDF error (those come back as values): a Ray/pickling fault
            raise ExecutorError(f"{handle.describe()} failed in the Ray runtime: {e}") from e
        if reply.spans:
            tracing.export_remote_spans(list(reply.spans))
        if reply.status is ReplyStatus.MISSING:  # ship it again with the resubmitted task
            kind, key = reply.payload
            with self._lock:
                handle.slot.ledgers[kind].forget(key)
        payload = reply.unwrap(handle.describe())
        if reply.status is ReplyStatus.HELD:
            self._held_by(handle).add(payload)
            return []
        held = self._held_by(handle)
        for res in payload:
            held.difference_update(res.partitions)
        return payload

    def _held_by(self, handle: _RayHandle, clear: bool = False) -> set[int]:
        """The partitions of the handle's run that its worker holds merged, not yet sent."""
        with self._lock:
            by_slot = self._held.setdefault(handle.run_id, {})
            if clear:
                return by_slot.pop(handle.slot.name, set())
            return by_slot.setdefault(handle.slot.name, set())

    def preferred(self, run_id: str) -> set[int]:
        merging = self.merge_interval_s is not None  # segments grow only where workers merge
        return self.policy.segments.preferred(merging, self.pool.last_sent(run_id) if merging else ())

    def flush(self, run_id: str) -> list[TaskHandle]:
        """Ask each worker holding merged results of the run for them (``WorkerActor.flush_run``,
        queued behind the run's tasks on that actor)."""
        handles: list[TaskHandle] = []
        with self._lock:
            held = {name: set(idxs) for name, idxs in self._held.get(run_id, {}).items() if idxs}
            slots = {s.name: s for s in self.pool.slots}
        for name, idxs in held.items():
            slot = slots.get(name)
            if slot is None:  # retired meanwhile: nothing will deliver them
                continue
            handle = _RayHandle(None, -1, slot.actor.flush_run.remote(run_id), slot, slot.actor, run_id, None,
                                expected=idxs)
            self._ring_when_done(handle.future, run_id)
            handles.append(handle)
        return handles

    def _replace(self, handle: _RayHandle) -> None:
        """The handle's actor died: retire it; the pool starts a replacement where there is room."""
        self.pool.lost(handle.slot, handle.actor)

    def cancel(self, handles: Sequence[TaskHandle]) -> None:
        """Tell each actor with tasks of the run to skip them: queued ones return at once, a running
        one stops at its next tile.

        No ``ray.cancel``: cancelling a queued call of an ordered actor leaves a gap in the actor's
        sequence numbers, and the actor then waits 30 s for the missing call before running the next
        run's tasks (seen as a 33 s run and a worker replaced for nothing).
        """
        told = set()
        for h in handles:
            assert isinstance(h, _RayHandle)
            key = (id(h.actor), h.run_id)
            if key not in told:
                told.add(key)
                try:
                    h.actor.cancel_run.remote(h.run_id)
                except Exception as e:  # its actor is gone
                    log.debug("cancel_run on %s: %s", h.slot.name, e)
            with self._lock:
                self._held.pop(h.run_id, None)
            self._settle(h)

    def run_function(self, fn: Callable, *args: Any) -> Any:
        self._await_started()
        ready = self.pool.ready
        if not ready:
            raise ExecutorError(f"no worker is ready to run {getattr(fn, '__name__', fn)}")
        slot = min(ready, key=lambda s: s.in_flight)
        actor = slot.actor
        try:
            reply: Reply = ray.get(actor.run_function.remote(fn, args))
        except _LOST as e:
            raise ExecutorError(f"worker {slot.name} died running {getattr(fn, '__name__', fn)}") from e
        return reply.unwrap(f"run_function({getattr(fn, '__name__', fn)})")

    # -- introspection and shutdown ----------------------------------------------
    @property
    def actors(self) -> list:
        """The ready worker actor handles (for tests and diagnostics); see :attr:`workers`."""
        self._await_started()
        return [s.actor for s in self.pool.ready]

    def close(self) -> None:
        """Kill this Context's actors and drop its object store references. Ray itself keeps running."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.pool.close()
            if self._progress_actor is not None:
                try:
                    ray.kill(self._progress_actor, no_restart=True)
                except Exception:
                    pass
                self._progress_actor = None
            self.shared.clear()
            self.slab.close()
            self._progress_polls.clear()
            self._wakeups.clear()
            self._held.clear()

    def __repr__(self) -> str:
        kinds = [s.kind for s in self.pool.slots]
        return f"<RayExecutor cpu={kinds.count('cpu')} cuda={kinds.count('cuda')}>"


def join_ray(address: str | None, cpus: int | None, gpus: int | None, max_workers: int | None,
             min_workers: int | None, init_kwargs: dict) -> None:
    """Check the worker counts, join or start Ray (:func:`~raytile.actors.ray_start.start_ray`, unless this
    process has already), and ask the autoscaler for ``min_workers`` CPUs. See :meth:`RayExecutor.make`."""
    for name, value in (("cpus", cpus), ("gpus", gpus), ("max_workers", max_workers),
                        ("min_workers", min_workers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigValidationError(f"{name} must be a non-negative integer, got {value!r}")
    if max_workers is not None and max_workers < 1:
        raise ConfigValidationError(f"max_workers must be at least 1, got {max_workers!r}")
    start_ray(address, cpus=cpus, gpus=gpus, autoscaling=bool(min_workers), init_kwargs=init_kwargs)
    if min_workers:
        _request_workers(min_workers)


def _this_node() -> str | None:
    """The id of the node this process runs on (where its ``ray.put`` objects live), if Ray says."""
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001  (Ray Client drivers have no node of their own)
        return None


def _request_workers(n: int) -> None:
    """Ask the cluster's autoscaler for ``n`` CPUs (a no-op on a cluster without one)."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[{"CPU": 1}] * n)
    except Exception as e:  # noqa: BLE001  (no autoscaler, or Ray Client without the SDK)
        log.info("could not ask the autoscaler for %d workers: %s", n, e)
