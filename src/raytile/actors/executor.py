"""`RayExecutor`: runs partition tasks on long-lived `WorkerActor`s.

One actor per CPU slot (``num_cpus=1``) and one per GPU (``num_gpus=1``),
created once per Context and reused by every run (no per-run start-up).
The Context does not wait for them to start: its first run begins on the
first worker that answers (``Context()`` was ~4 s slower than ``ray.init``
alone while it waited for every actor to import raytile).

The executor composes one part per job, each in its own module:

==============================  ===============================================================
part                            job
==============================  ===============================================================
``pool`` (pool.py)              the worker actors, following the cluster
``monitor`` (pool_monitor.py)   the thread that refreshes the pool; waiting for the first workers
``put_params`` (shipping.py)    a run's parameters packed once per version, shipped once per actor
``frames`` (frame_sharing.py)   in-memory data sets' frames (object store) and a stream's (slab)
``submitter`` (submission.py)   sending tasks to the workers the policy picks; tasks in flight
``progress`` (progress_polls)   per-tile progress, long-polled from the progress actor
``held`` (held_results.py)      the ledger of results workers hold merged, and flushing them
``cancel`` (cancel.py)          telling the workers to skip a cancelled run's tasks
``wakeups`` (wakeups.py)        each run's wakeup event, set by task futures and the pool
==============================  ===============================================================

How many tasks go out and to which worker is decided by the
:class:`~raytile.runtime.dispatch_policy.DispatchPolicy` (two in flight per
actor, so an actor's next partition is already queued when the current one
ends; the node holding a task's frames; the worker whose segment it
extends); the coordinator blocks on its run's wakeup event
(:meth:`RayExecutor.wait`), so nothing polls Ray.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from typing import Any, Callable, Sequence, cast

import numpy as np
import ray
from ray import exceptions as rex

from raytile.actors.cancel import tell_cancelled
from raytile.actors.frame_sharing import FrameSharing
from raytile.actors.frame_slab import FrameSlab
from raytile.actors.held_results import HeldResults
from raytile.actors.lost import WORKER_LOST
from raytile.actors.pool import WorkerPool
from raytile.actors.pool_monitor import PoolMonitor
from raytile.actors.progress_polls import ProgressPolls
from raytile.actors.ray_start import start_ray
from raytile.actors.reply import Reply, ReplyStatus
from raytile.actors.shared_frames import SharedFrames
from raytile.actors.shipping import ParamsHandle, put_params
from raytile.actors.submission import RayTaskHandle, Submitter
from raytile.actors.wakeups import RunWakeups
from raytile.actors.worker_warnings import warn_again
from raytile.common.device_class import DeviceClass
from raytile.common.errors import ConfigValidationError, ExecutorError
from raytile.runtime.dispatch_policy import DISPATCH_POLICY, DispatchPolicy
from raytile.runtime.executor import Executor, ProgressSink, TaskHandle, WorkerLost
from raytile.runtime.params import PartitionResult, PartitionTask
from raytile.runtime import tracing

__all__ = ["RayExecutor", "join_ray", "MERGE_INTERVAL_S"]

log = logging.getLogger(__name__)

#: By default workers send their merged results at most this often (seconds).
MERGE_INTERVAL_S = 0.1


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
        self._close_lock = threading.Lock()
        self._closed = False
        self.merge_interval_s = merge_interval_s
        self._warning_registry: dict = {}  # where warn_again notes the worker warnings shown once
        self.wakeups = RunWakeups()
        self.held = HeldResults()
        self.frames = FrameSharing()
        self.pool = WorkerPool(fixed, cpu_share, max_workers, on_change=self.wakeups.wake_all,
                               on_nodes_lost=self.frames.renew, policy=self.policy)
        # started with the workers: creating it lazily would cost a process start in the first run with progress
        self.progress = ProgressPolls(self.wakeups, start_timeout)
        self.submitter = Submitter(self.pool, self.frames, self.wakeups, self.policy)
        self.pool.refresh()  # creates the actors; they start in the background (see raytile.actors.pool)
        self.monitor = PoolMonitor(self.pool, fixed, start_timeout)

    # -- the pool ----------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        return max(1, len(self.pool.slots))

    @property
    def max_in_flight(self) -> int:
        return self.policy.in_flight.run_limit(len(self.pool.ready))

    @property
    def full_in_flight(self) -> int:
        return self.policy.in_flight.run_limit(len(self.pool.slots))

    @property
    def device_classes(self) -> frozenset[DeviceClass]:
        return self.pool.kinds()

    @property
    def workers(self) -> list[dict]:
        """What the ready workers said about themselves (name, kind, pid, host, node, caches); the first
        time, once the actors the Context was made with started."""
        self.monitor.await_started()
        return [s.info for s in self.pool.ready]

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
    def put_params(self, params: Any) -> ParamsHandle:
        return put_params(params)

    @property
    def shared(self) -> SharedFrames:
        """In-memory data sets' frames in the object store (:class:`~raytile.actors.shared_frames.SharedFrames`)."""
        return self.frames.shared

    @property
    def slab(self) -> FrameSlab:
        """The shared-memory slots a stream's frames reach this node's workers in (:class:`~raytile.actors.frame_slab.FrameSlab`)."""
        return self.frames.slab

    def prepare_dataset(self, dataset: Any) -> None:
        """Put an in-memory data set's partitions into the object store, once per DataSet object.

        The copy lives as long as the DataSet (see :mod:`raytile.actors.shared_frames`).
        """
        from raytile.io.partition_source import dense_frames

        self.frames.forget_released(self.pool.slots)
        frames = dense_frames(dataset)
        if frames:
            self.frames.shared.share(dataset, frames)

    def share_frames(self, frames: Any) -> Any:
        """A stream partition's frames as its task carries them (see :meth:`FrameSharing.share_frames`);
        the worker reads them zero-copy and does not cache them."""
        return self.frames.share_frames(frames)

    def stream_buffer(self, shape: tuple, dtype: Any) -> np.ndarray:
        return self.frames.stream_buffer(shape, dtype)

    # -- tasks -----------------------------------------------------------------
    def submit(self, task: PartitionTask, params_handle: Any, version: int,
               progress: ProgressSink | None = None) -> TaskHandle:
        if self._closed:
            raise ExecutorError("this Context is closed")
        self.monitor.raise_startup_error()
        progress_actor = None
        if progress is not None:
            progress_actor = self.progress.actor_for(params_handle.run_id, progress)
        return self.submitter.submit(task, params_handle, version, progress_actor, progress)

    def start_run(self, run_id: str, wakeup: threading.Event) -> None:
        self.wakeups.start(run_id, wakeup)

    def wait(self, run_id: str, handles: Sequence[TaskHandle], timeout: float) -> list[TaskHandle]:
        """The finished handles, and those whose worker the pool retired (their tasks are lost); blocks on
        the run's wakeup event (no polling of Ray) if there are none.

        Task futures and progress polls set the event from Ray's callback
        thread, the coordinator sets it on a patch or a cancel. Only the
        coordinator clears it. Progress that arrived is delivered here, in
        the coordinator's thread.
        """
        if not handles:  # nothing in flight (no worker ready): sleep until the pool or the run changes
            self.monitor.raise_startup_error()
            wakeup = self.wakeups.get(run_id)
            if wakeup is not None:
                wakeup.wait(timeout)
            return []
        ray_handles = cast(Sequence[RayTaskHandle], handles)
        wakeup = self.wakeups.get(run_id)
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
        self.progress.deliver(run_id)
        return [h for h in cast(Sequence[RayTaskHandle], handles) if h.future.done() or h.slot.dead]

    def finish_run(self, run_id: str) -> None:
        """Deliver the run's last progress counts and forget its progress poll."""
        self.wakeups.forget(run_id)
        self.held.drop(run_id)
        self.progress.finish(run_id)

    def result(self, handle: TaskHandle) -> list[PartitionResult]:
        assert isinstance(handle, RayTaskHandle)
        self.submitter.settle(handle)
        if handle.slot.dead and not handle.future.done():
            # The pool retired its worker (its node left the cluster, or it died): the task is lost now.
            # Ray fails it only once it declares the node dead (its health checks: ~30 s by default, and a
            # run after a node loss waited that long for tasks it had sent to the lost node's workers).
            raise WorkerLost(f"worker {handle.slot.name} was retired while running {handle.describe()}",
                             held=self.held.take(handle.run_id, handle.slot.name))
        try:
            reply: Reply = handle.future.result()
        except WORKER_LOST as e:
            self.pool.lost(handle.slot, handle.actor)  # a replacement starts where there is room
            raise WorkerLost(f"worker {handle.slot.name} died running {handle.describe()}: {type(e).__name__}",
                             held=self.held.take(handle.run_id, handle.slot.name)) from e
        except rex.RayTaskError as e:  # not a UDF error (those come back as values): a Ray/pickling fault
            raise ExecutorError(f"{handle.describe()} failed in the Ray runtime: {e}") from e
        if reply.spans:
            tracing.export_remote_spans(list(reply.spans))
        if reply.warnings:  # what the task's UDFs warned on the worker, here as inline
            warn_again(reply.warnings, self._warning_registry)
        if reply.status is ReplyStatus.MISSING:  # ship it again with the resubmitted task
            kind, key = reply.payload
            self.submitter.missing(handle, kind, key)
        payload = reply.unwrap(handle.describe())
        if reply.status is ReplyStatus.HELD:
            self.held.hold(handle.run_id, handle.slot.name, payload)
            return []
        for res in payload:
            self.held.sent(handle.run_id, handle.slot.name, res.partitions)
        return payload

    def preferred(self, run_id: str) -> set[int]:
        merging = self.merge_interval_s is not None  # segments grow only where workers merge
        return self.policy.segments.preferred(merging, self.pool.last_sent(run_id) if merging else ())

    def flush(self, run_id: str) -> list[TaskHandle]:
        """Ask each worker holding merged results of the run for them (``WorkerActor.flush_run``,
        queued behind the run's tasks on that actor)."""
        return list(self.held.flush(run_id, self.pool.slots, self.wakeups))

    def cancel(self, handles: Sequence[TaskHandle]) -> None:
        """Tell each actor with tasks of the run to skip them: queued ones return at once, a running
        one stops at its next tile (see :mod:`raytile.actors.cancel`: no ``ray.cancel``)."""

        def done(h: RayTaskHandle) -> None:
            self.held.drop(h.run_id)
            self.submitter.settle(h)

        tell_cancelled(cast(Sequence[RayTaskHandle], handles), done)

    def run_function(self, fn: Callable, *args: Any) -> Any:
        self.monitor.await_started()
        ready = self.pool.ready
        if not ready:
            raise ExecutorError(f"no worker is ready to run {getattr(fn, '__name__', fn)}")
        slot = min(ready, key=lambda s: s.in_flight)
        actor = slot.actor
        try:
            reply: Reply = ray.get(actor.run_function.remote(fn, args))
        except WORKER_LOST as e:
            raise ExecutorError(f"worker {slot.name} died running {getattr(fn, '__name__', fn)}") from e
        return reply.unwrap(f"run_function({getattr(fn, '__name__', fn)})")

    # -- introspection and shutdown ----------------------------------------------
    @property
    def actors(self) -> list:
        """The ready worker actor handles (for tests and diagnostics); see :attr:`workers`."""
        self.monitor.await_started()
        return [s.actor for s in self.pool.ready]

    def close(self) -> None:
        """Kill this Context's actors and drop its object store references. Ray itself keeps running."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self.monitor.stop()
            self.pool.close()
            self.progress.close()
            self.frames.close()
            self.wakeups.clear()
            self.held.drop(None)

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


def _request_workers(n: int) -> None:
    """Ask the cluster's autoscaler for ``n`` CPUs (a no-op on a cluster without one)."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[{"CPU": 1}] * n)
    except Exception as e:  # noqa: BLE001  (no autoscaler, or Ray Client without the SDK)
        log.info("could not ask the autoscaler for %d workers: %s", n, e)
