"""`CoordinatorActor`: a Context's workers and its runs' coordinators, as an async Ray actor.

With ``Context(coordinator="actor")`` (the default for Ray Client, ``ray://``,
drivers) the Context starts one of these on the cluster. It owns the
Context's :class:`~raytile.actors.executor.RayExecutor` (the worker pool and
the shared in-memory frames) and hosts its runs, each a
:class:`~raytile.runtime.active_run.ActiveRun` (the same run object a driver
hosts: parameter versions, UDFs, a coordinator thread, a latest-wins
channel), so partial results are merged inside the cluster and only
snapshots travel to the viewers. A viewer long-polls :meth:`CoordinatorActor.next`
for what is newer than the sequence number it saw; the call waits on the
run's channel.

It is a named, detached actor (namespace ``raytile``), so that

- another process can find a run by its id and view it too
  (``Context.attach``), and
- a run started with ``detached=True`` goes on when the driver that started
  it exits; its result is kept ``detached_keep_s`` (default ``DETACHED_KEEP_S``,
  ``Context(coordinator="actor", detached_keep_s=...)``) for viewers to attach.

It ends itself: a reaper looks at the cluster's job table every
``REAP_S``; once the driver that made it is gone, that driver's other runs
are cancelled, the workers are released when no detached run is running
any more, and the actor exits when no kept result is left either.

The driver side is :class:`raytile.actors.actor_host.ActorHost`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import ray

from raytile.actors.reply import Reply
from raytile.common.errors import ExecutorError, RunEnded
from raytile.runtime.active_run import ActiveRun
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressState, ProgressTally
from raytile.runtime.results import UDFResults
from raytile.runtime.stream_feed import InletClosed

__all__ = ["CoordinatorActor", "HostedRun", "RunUpdate", "runs_to_drop", "NAMESPACE", "NAME_PREFIX", "REAP_S",
           "DETACHED_KEEP_S", "MAX_KEPT"]

log = logging.getLogger(__name__)

#: The Ray namespace of coordinator actors, and the prefix of their names.
NAMESPACE = "raytile"
NAME_PREFIX = "raytile-coordinator-"
#: How often the reaper looks at the job table and the runs.
REAP_S = 2.0
#: How long a detached run's result is kept after it ended, for viewers to attach.
DETACHED_KEEP_S = 3600.0
#: At most this many ended runs are kept (the oldest are dropped first).
MAX_KEPT = 16


@dataclass(frozen=True)
class RunUpdate:
    """What :meth:`CoordinatorActor.next` tells a viewer: the newest item's sequence number, the item
    (a snapshot, or the run's end), the run's progress, and the run's end if the item is the final
    snapshot (one round trip less for the viewer), else None."""

    seq: int
    item: Any
    progress: ProgressState
    end: Any = None
    #: partitions folded into later snapshots so far (``UDFRun.coalesced``), as the update was made
    coalesced: int = 0


@dataclass
class HostedRun:
    """One run in the actor: the run, its progress, who views it."""

    live: ActiveRun
    tally: ProgressTally
    viewers: int = 1  #: the driver that started it, plus attached viewers still iterating
    ended_at: float | None = None
    #: asyncio futures of viewers waiting for something newer (set when the run's channel changes)
    waiters: list = field(default_factory=list)

    @property
    def over(self) -> bool:
        return self.live.over

    @property
    def detached(self) -> bool:
        return self.live.detached


def runs_to_drop(runs: dict[str, HostedRun], now: float, keep_s: float = DETACHED_KEEP_S,
                 max_kept: int = MAX_KEPT) -> list[str]:
    """Ended runs to forget: a run no viewer iterates any more (unless detached and younger than
    ``keep_s``), and the oldest beyond ``max_kept`` ended runs."""
    ended = {rid: (r, r.ended_at) for rid, r in runs.items() if r.over and r.ended_at is not None}
    drop = [rid for rid, (r, ended_at) in ended.items()
            if (not r.detached and r.viewers <= 0) or (r.detached and now - ended_at > keep_s)]
    rest = sorted((ended_at, rid) for rid, (_, ended_at) in ended.items() if rid not in drop)
    drop += [rid for _, rid in rest[:max(0, len(rest) - max_kept)]]
    return drop


class CoordinatorActor:
    """The actor; every method is a coroutine, blocking work runs in threads.

    Made by :class:`~raytile.actors.actor_host.ActorHost`; ``executor_kwargs``
    go to :meth:`RayExecutor.make` when the first data set is loaded or run
    (a Context that only attaches to runs starts no workers).
    """

    def __init__(self, executor_kwargs: dict, owner_job: str, detached_keep_s: float = DETACHED_KEEP_S):
        # blocking ray.get happens only in this actor's threads (the executor's), never in its event loop
        os.environ["RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"] = "0"
        _undo_worker_niceness()
        self._executor_kwargs = executor_kwargs
        self._owner_job = owner_job
        self._keep_s = float(detached_keep_s)
        self._owner_gone = False
        self._closing = False
        self._executor: Any = None
        self._runs: dict[str, HostedRun] = {}
        self._reaper: asyncio.Task | None = None
        self._start_lock: asyncio.Lock | None = None
        #: bytes of results this actor's coordinators received, and their CPU seconds, per run (benchmarks)
        self.stats: dict[str, dict] = {}

    # -- workers -----------------------------------------------------------------
    async def _ensure_executor(self) -> Any:
        self._ensure_reaper()
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._executor is None:
                if self._closing:
                    raise ExecutorError("this Context is closed")
                from raytile.actors.executor import RayExecutor

                self._executor = await asyncio.to_thread(RayExecutor.make, **self._executor_kwargs)
        return self._executor

    @ray.method(enable_task_events=False)  # asked again and again (16 times in 50 served runs)
    async def describe(self) -> dict:
        """Start the workers if need be; what a Context needs to plan runs."""
        ex = await self._ensure_executor()
        return {"num_workers": ex.num_workers, "device_classes": ex.device_classes, "workers": ex.workers,
                "shared_datasets": len(ex.shared)}

    async def run_function(self, fn: Callable, args: tuple) -> Reply:
        try:
            ex = await self._ensure_executor()
            return Reply.ok(await asyncio.to_thread(ex.run_function, fn, *args))
        except Exception as e:  # noqa: BLE001  (raised again in the driver as it is)
            return Reply.error(e)

    async def share_dataset(self, key: int, frames: dict) -> None:
        """Put a loaded memory data set's frames into the object store (this actor owns the copy)."""
        ex = await self._ensure_executor()
        await asyncio.to_thread(ex.shared.share_as, key, frames)

    async def release_dataset(self, key: int) -> None:
        if self._executor is not None:
            self._executor.shared.release(key)

    # -- runs ----------------------------------------------------------------------
    @ray.method(enable_task_events=False)  # per run, as the methods below: no task events (see ray_start.py)
    async def start(self, plan: RunPlan, final_only: bool, detached: bool, progress: bool) -> Reply:
        """Start coordinating a run planned by the driver (``RunPlan.without_frames``); with
        ``progress`` its workers report every tile (which costs time: only when asked for).
        An OK reply of the run's id, or an ERROR reply."""
        try:
            ex = await self._ensure_executor()
            _undo_worker_niceness()  # threads Ray started since
            loop = asyncio.get_running_loop()
            tally = ProgressTally()
            live = ActiveRun(ex, plan, tally if progress else None, final_only=final_only, detached=detached)
            run_id = live.run_id

            def on_change() -> None:  # from the run's coordinator thread
                try:
                    loop.call_soon_threadsafe(self._changed, run_id)
                except RuntimeError:  # the event loop is closed: the actor is exiting
                    pass

            live.channel.on_change(on_change)
            self._runs[run_id] = HostedRun(live, tally)
            live.start()
            return Reply.ok(run_id)
        except Exception as e:  # noqa: BLE001
            return Reply.error(e)

    @ray.method(enable_task_events=False)  # per stream partition: no task events kept (see ray_start.py)
    async def feed(self, run_id: str, idx: int, frames: list) -> bool:
        """A stream partition from the driver that reads the stream: ``frames`` holds its object ref.
        Answers once the run's inlet took it (it waits while the inlet is full: backpressure); False
        if the run is over (the driver stops reading)."""
        run = self._runs.get(run_id)
        inlet = run.live.inlet if run is not None else None
        if inlet is None:
            return False
        try:
            await asyncio.to_thread(inlet.put, idx, frames[0])
        except InletClosed:
            return False
        return True

    @ray.method(enable_task_events=False)
    async def end_stream(self, run_id: str, error: BaseException | None) -> None:
        """The driver's stream ended (``error`` None) or failed."""
        run = self._runs.get(run_id)
        inlet = run.live.inlet if run is not None else None
        if inlet is not None:
            inlet.fail(error) if error is not None else inlet.end()

    def _changed(self, run_id: str) -> None:
        """The run's channel has something new (called in the event loop)."""
        run = self._runs.get(run_id)
        if run is None:
            return
        if not run.over:
            run.ended_at = None  # computing again (a late recompute patch): it ends anew
        elif run.ended_at is None:
            run.ended_at = time.monotonic()
            self.stats[run_id] = run.live.stats
            while len(self.stats) > 4 * MAX_KEPT:
                self.stats.pop(next(iter(self.stats)))
        waiters, run.waiters = run.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _run(self, run_id: str) -> HostedRun:
        run = self._runs.get(run_id)
        if run is None:
            raise ExecutorError(f"no run {run_id!r} here (it ended and its result was dropped, or it never "
                                "started on this Context's coordinator)")
        return run

    @ray.method(enable_task_events=False)  # per result and per poll: no task events kept (see ray_start.py)
    async def next(self, run_id: str, after: int, timeout: float) -> Reply:
        """The run's newest item after sequence number ``after``: an OK reply of a :class:`RunUpdate`;
        a WAIT reply of ``RunUpdate(after, None, progress)`` if nothing came within ``timeout``; an
        ERROR reply for an unknown run."""
        try:
            run = self._run(run_id)
        except ExecutorError as e:
            return Reply.error(e)
        deadline = time.monotonic() + timeout
        while True:
            got = run.live.channel.peek(after)
            if got is not None:
                seq, item = got
                if isinstance(item, UDFResults) and item.finished:  # the run's end follows the final snapshot
                    await self._wait_changed(run, lambda: run.over, deadline=time.monotonic() + 1.0)
                return Reply.ok(RunUpdate(seq, item, run.tally.state, run.live.channel.terminal if run.over else None,
                                          run.live.coalesced))
            if not await self._wait_changed(run, lambda: False, deadline):
                return Reply.wait(RunUpdate(after, None, run.tally.state))

    async def _wait_changed(self, run: HostedRun, done: Callable[[], bool], deadline: float) -> bool:
        """Wait until the run's channel changes or ``done()``; False if ``deadline`` passed first."""
        if done():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        waiter = asyncio.get_running_loop().create_future()
        run.waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, remaining)
        except asyncio.TimeoutError:
            return False
        return True

    @ray.method(enable_task_events=False)
    async def attach(self, run_id: str) -> Reply:
        """A new viewer of the run: an OK reply of its UDFs (ERROR for an unknown run)."""
        try:
            run = self._run(run_id)
        except ExecutorError as e:
            return Reply.error(e)
        run.viewers += 1
        return Reply.ok(run.live.udfs)

    @ray.method(enable_task_events=False)
    async def leave(self, run_id: str) -> None:
        """A viewer stopped iterating the run."""
        run = self._runs.get(run_id)
        if run is not None:
            run.viewers -= 1
            self._drop_ended()

    @ray.method(enable_task_events=False)
    async def has_run(self, run_id: str) -> bool:
        return run_id in self._runs

    async def runs(self) -> list[dict]:
        """The runs here: id, UDF names, whether detached, over, viewers."""
        return [{"run_id": rid, "udfs": [type(u).__name__ for u in r.live.udfs], "detached": r.detached,
                 "over": r.over, "viewers": r.viewers} for rid, r in self._runs.items()]

    @ray.method(enable_task_events=False)
    async def patch(self, run_id: str, patches: list[dict], recompute: bool) -> Reply:
        """A live patch: an OK reply, or an ERROR reply of why it was refused (a bad patch)."""
        run = self._runs.get(run_id)
        try:
            if run is None:
                raise RunEnded(f"run {run_id[:8]} has ended (its viewers read its end): a patch cannot take "
                               "effect any more; start a new run with the new parameters")
            run.live.patch(patches, recompute)
        except Exception as e:  # noqa: BLE001  (raised again in the driver as it is)
            return Reply.error(e)
        return Reply.ok(None)

    @ray.method(enable_task_events=False)
    async def cancel(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is not None:
            run.live.cancel()

    @ray.method(enable_task_events=False)
    async def only_final_result(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is not None and run.viewers <= 1:
            run.live.only_final_result()

    @ray.method(enable_task_events=False)
    async def join(self, run_id: str, timeout: float) -> None:
        run = self._runs.get(run_id)
        if run is not None:
            await asyncio.to_thread(run.live.join, timeout)

    @ray.method(enable_task_events=False)
    async def status(self, run_id: str) -> dict:
        run = self._runs.get(run_id)
        if run is None:
            return {"finished": True, "coalesced": 0}
        return {"finished": run.live.finished, "coalesced": run.live.coalesced}

    @ray.method(enable_task_events=False)
    async def run_stats(self, run_id: str) -> dict | None:
        """Bytes of results the run's coordinator received and its CPU seconds (once it ended)."""
        return self.stats.get(run_id)

    # -- the end ---------------------------------------------------------------------
    async def close(self) -> None:
        """The driver closed its Context: cancel its runs but the detached ones; release the workers
        once no detached run is running; exit once nothing is kept."""
        self._closing = True
        await self._wind_down()

    async def _wind_down(self) -> None:
        for run in self._runs.values():
            if not run.detached and not run.over:
                run.live.cancel()
        if any(r.detached and not r.over for r in self._runs.values()):
            return
        if self._executor is not None:
            ex, self._executor = self._executor, None
            await asyncio.to_thread(ex.close)
        self._drop_ended()
        if not any(r.detached for r in self._runs.values()):
            for run in self._runs.values():
                await asyncio.to_thread(run.live.join, 5.0)
            self._exit()

    def _exit(self) -> None:
        log.info("raytile coordinator actor exits")
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def _ensure_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_S)
            try:
                self._drop_ended()
                if not self._owner_gone:
                    self._owner_gone = not await asyncio.to_thread(_job_alive, self._owner_job)
                if self._owner_gone or self._closing:
                    await self._wind_down()
            except Exception as e:  # noqa: BLE001  (try again at the next turn)
                log.warning("coordinator actor reaper: %s", e)

    def _drop_ended(self) -> None:
        for rid in runs_to_drop(self._runs, time.monotonic(), keep_s=self._keep_s):
            run = self._runs.pop(rid)
            for w in run.waiters:
                if not w.done():
                    w.set_result(None)


def _undo_worker_niceness() -> None:
    """Ray starts actor processes at niceness 15; a coordinator at that priority waits behind busy
    workers on its node (measured: 20-30% less throughput with the workers saturating the CPUs).
    Back to 0 where the process may (root, CAP_SYS_NICE), for each of its threads (on Linux the
    niceness is per thread, and new threads inherit their creator's); else it stays as it is."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError as e:
            log.debug("coordinator actor keeps Ray's niceness: %s", e)
            return


def _job_alive(job_id: str) -> bool:
    """Whether the driver job ``job_id`` is alive (Ray's job table; True if it cannot be read)."""
    try:
        from ray._private import state

        for job in state.jobs():
            if job["JobID"] == job_id:
                return not job["IsDead"]
    except Exception as e:  # noqa: BLE001  (an internal API: keep the actor rather than lose runs)
        log.debug("job table unavailable: %s", e)
        return True
    return False

