"""`Coordinator`: dispatches a run's tasks, merges results, publishes `UDFResults`.

It runs in one thread in the driver per run and talks to any
:class:`~raytile.runtime.executor.Executor`. Each turn of its loop has five
named phases::

    apply_patches -> admit -> dispatch -> collect -> publish

Every run pulls its tasks from its :class:`~raytile.runtime.run_input.RunInput`:
``admit`` takes what is there without blocking (a fixed list all at the
first turn; a stream's partitions as they arrive, read by a feeder thread
into a bounded inlet), and the end of the input arrives there as an event.
The loop ends when the input ended and no task waits or runs. It
sleeps only inside the executor's ``wait``, on a wakeup event that task
completions, patches, cancels and the consumer taking a result set. The
event is cleared at the top of a turn, *before* the loop looks at its
inputs, so nothing that arrives during a turn is missed. Results go to the
run's :class:`~raytile.runtime.channel.SnapshotChannel` (latest wins), which
its viewers read; patches come as versions of
:class:`~raytile.runtime.param_versions.ParamVersions`. Both belong to the
run (:class:`~raytile.runtime.active_run.ActiveRun`, which makes the
coordinator). See docs/coordinator.md.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

from raytile.common.errors import ExecutorError, UDFRunCancelled
from raytile.runtime import tracing
from raytile.runtime.executor import Executor, NoWorkerReady, TaskHandle, TaskNotRun, WorkerLost
from raytile.runtime.channel import FINISHED, SnapshotChannel, should_publish
from raytile.runtime.param_versions import ParamVersions
from raytile.runtime.params import PartitionResult, RunParams
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import ResultAccumulator
from raytile.runtime.run_input import run_input
from raytile.runtime.run_state import MAX_RETRIES, Outcome, RunState, starved_too_long
from raytile.runtime.scans import ScanResults
from raytile.runtime.stream_feed import PartitionInlet

__all__ = ["Coordinator", "POLL_S", "FINISHED"]

#: The longest one wait for task completion blocks. Only a safety net: every event the loop reacts to
#: (a task finishing, a patch, a cancel, the consumer taking a result) ends the wait at once.
POLL_S = 0.2
#: How long a run waits with partitions pending and no worker ready to take them (workers starting or
#: being replaced, a node joining) before it fails.
NO_WORKER_TIMEOUT_S = 60.0


class Coordinator:
    """Drives one run: ``start()`` it; ``wake``/``cancel`` from any thread. Made by a
    :class:`~raytile.runtime.active_run.ActiveRun`, whose ``versions`` and ``channel`` it works on."""

    def __init__(self, executor: Executor, plan: RunPlan, versions: ParamVersions, channel: SnapshotChannel,
                 progress: ProgressReporter | None = None, span: Any = None, final_only: bool = False,
                 on_end: Callable[[Any], None] | None = None):
        """``versions``: the run's parameter versions (live patches); ``channel``: where its snapshots
        and its end go; ``final_only``: the caller wants the final result alone (``Context.run_udf``):
        no partial snapshots, and workers hold their merged results until the end of the run;
        ``on_end``: called with the run's end (``FINISHED`` or its exception) as the last act of the
        coordinator's thread, instead of putting it into ``channel`` (the run decides, see
        :class:`~raytile.runtime.active_run.ActiveRun`)."""
        self._executor = executor
        self._span = span  # the run's span, opened by the Context around planning (or here)
        self._plan = plan
        self._progress = progress
        self._cancelled = threading.Event()
        self._wakeup = threading.Event()
        self._channel = channel
        self._on_end: Callable[[Any], None] | None = on_end if on_end is not None else channel.end
        channel.on_take(self._wakeup.set)  # a viewer took a snapshot: the next one may be published
        self._final_only = final_only
        self._versions = versions
        self._input = run_input(plan, executor, self._wakeup.set)
        self._state = RunState([])
        self._state.more_coming = True  # until the input ended (see _admit)
        self._params: RunParams = plan.params
        self._params_handle: Any = None
        self._frames_reported = 0
        self._frames_merged = 0
        self._coalesced = 0
        self._received = {"bytes": 0, "results": 0}
        self._cpu_s = 0.0
        self._wall_s = 0.0
        self._acc: ResultAccumulator | ScanResults | None = self._input.accumulator(lambda: ResultAccumulator(
            [u.copy() for u in plan.udfs], plan.params.dataset_shape, plan.params.roi, plan.metas(),
            plan.partition_offsets, plan.total_partitions))
        self._thread = threading.Thread(target=self._main, name=f"raytile-run-{self.run_id[:8]}", daemon=True)

    @property
    def inlet(self) -> PartitionInlet | None:
        """Where a stream's partitions arrive (fed here or, coordinated on the cluster, by the driver
        that reads the stream); None for a fixed list."""
        return self._input.inlet

    @property
    def run_id(self) -> str:
        return self._plan.params.run_id

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def wake(self) -> None:
        """Look at the inputs now (a new parameter version came)."""
        self._wakeup.set()

    def cancel(self) -> None:
        self._cancelled.set()
        self._channel.drop()
        self._input.stop()  # a stream's source is pulled no more from now on, not from the loop's end
        self._wakeup.set()

    def only_final_result(self) -> None:
        """Publish only the final result from now on (the caller waits for the end anyway)."""
        self._final_only = True

    @property
    def final_only(self) -> bool:
        return self._final_only

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def coalesced(self) -> int:
        """Merged partitions whose partial result was not delivered on its own but folded into a later one."""
        return max(0, self._coalesced) + self._channel.replaced

    @property
    def finished(self) -> bool:
        """True once the run's thread is over (its results and state released)."""
        return not self._thread.is_alive() and self._acc is None

    @property
    def running(self) -> bool:
        """True from ``start`` until the run's thread ends."""
        return self._thread.is_alive()

    @property
    def stats(self) -> dict:
        """What this coordinator received, ``bytes`` of result buffers in ``results`` results, and its
        thread's CPU seconds (``cpu_s``) and wall seconds from start to end (``wall_s``), complete once
        the run ended: the cost of coordinating. A stream run adds ``stream_partitions`` (arrived),
        ``stream_max_in_flight`` (the most partitions between arrival and done at once, its memory bound)
        and ``stream_capacity`` (see :class:`~raytile.runtime.run_input.StreamInput`)."""
        return {**self._received, "cpu_s": self._cpu_s, "wall_s": self._wall_s, **self._input.stats}

    # -- the run ---------------------------------------------------------------
    def _main(self) -> None:
        span = self._span if self._span is not None else tracing.start_span("raytile.run")
        span.set_attribute("raytile.run_id", self.run_id)
        span.set_attribute("raytile.partitions", len(self._plan.tasks))
        terminal: Any = FINISHED
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        try:
            with tracing.use_span(span):
                self._begin()
                while not self._state.done:
                    self._wakeup.clear()  # before looking at inputs: whatever arrives from now on sets it
                    self._check_cancelled()
                    self._apply_patches()
                    self._admit()
                    self._dispatch()
                    if not self._state.done:  # else the input ended with nothing to run: nothing to wait for
                        self._collect(self._executor.wait(self.run_id, self._state.in_flight, POLL_S))
                    self._publish(finished=self._state.done)
        except BaseException as e:  # handed to the consumer
            self._stop_in_flight()
            tracing.record_error(span, e)
            if isinstance(e, UDFRunCancelled):
                self._channel.drop()
            terminal = e
        finally:
            self._input.close()  # a stream's feeder stops reading the source
            span.end()
            self._end()
            self._cpu_s = time.thread_time() - cpu0
            self._wall_s = time.perf_counter() - wall0
            # last: the viewers see the run's end after progress is final; the callback (a bound method of
            # the ActiveRun that holds this coordinator) is let go, so a finished run is freed by reference
            # counting, and with it the data set, e.g. a live acquisition and its connection's socket
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                on_end(terminal)

    def _begin(self) -> None:
        ex = self._executor
        if self._plan.dataset is not None:  # None: shared when it was loaded (see RunPlan.without_frames)
            ex.prepare_dataset(self._plan.dataset)
        ex.start_run(self.run_id, self._wakeup)
        interval = ex.merge_interval_s if self._input.merges_near_data else None
        if interval is not None and self._final_only:
            interval = math.inf  # nothing to show meanwhile: one merged state per worker, at the end
        self._params = replace(self._plan.params, trace_context=tracing.inject_context(),
                               merge_interval_s=interval)
        if interval is not None:
            self._state.spread_segments()
        self._params_handle = ex.put_params(self._params)
        if self._progress is not None:
            self._progress.start(self.run_id, *self._input.expected())
        self._input.start(ex, self.run_id, self._cancelled.is_set)

    def _end(self) -> None:
        try:
            self._executor.finish_run(self.run_id)
        except Exception:  # noqa: BLE001  (progress flush is best effort)
            pass
        if self._progress is not None:
            if self._frames_merged > self._frames_reported:  # tile reports lost with a dead progress actor
                self._progress.advance(self.run_id, self._frames_merged - self._frames_reported)
            self._progress.finish(self.run_id)
        self._acc = None  # the merged buffers: the consumer has its own snapshots

    # -- phases ----------------------------------------------------------------
    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise UDFRunCancelled(f"run {self.run_id[:8]} was cancelled")

    def _apply_patches(self) -> None:
        """Take the parameter versions made since the last turn: tasks from now on run with the newest."""
        for version in self._versions.take_new():
            assert self._acc is not None
            self._params = replace(version.params, trace_context=self._params.trace_context,
                                   merge_interval_s=self._params.merge_interval_s)
            self._params_handle = self._executor.put_params(self._params)
            self._acc.adopt(version)
            if version.recompute:
                self._acc.reset()
                self._state.recompute_all(self._params.version)

    def _admit(self) -> None:
        """Queue the tasks the input has ready (never waits); its end arrives here too, and a
        stream's failure is raised here."""
        for task in self._input.take():
            self._state.add(task)
        if self._input.ended:
            self._state.more_coming = False

    def _dispatch(self) -> None:
        sink = self._on_tile if self._progress is not None else None
        while (task := self._state.next_to_submit(self._executor.max_in_flight, self._preferred())) is not None:
            try:
                handle = self._executor.submit(task, self._params_handle, self._params.version, sink)
            except NoWorkerReady:
                self._state.not_run(task)
                break
            self._state.submitted(handle)
        if starved_too_long(self._state, time.monotonic(), NO_WORKER_TIMEOUT_S):
            raise ExecutorError(
                f"run {self.run_id[:8]}: no worker able to run its tasks was ready for {NO_WORKER_TIMEOUT_S:.0f} s "
                f"({len(self._state.pending)} partitions wait; worker kinds: {sorted(self._executor.device_classes)})"
            )

    def _preferred(self) -> set[int]:
        """Partitions the executor would like next (asked anew for each task: every submission extends
        a worker's segment); none for an input whose partitions are not merged near the data (a
        stream's go in arrival order)."""
        return self._executor.preferred(self.run_id) if self._input.merges_near_data else set()

    def _collect(self, done: Sequence[TaskHandle]) -> None:
        for handle in done:
            self._state.returned(handle)
            results = self._task_results(handle)
            if results is None:
                continue
            if not results and handle.task is not None:
                self._state.hold(handle.task)  # merged on its worker, sent later
            for result in results:
                self._received["results"] += 1
                self._received["bytes"] += result.nbytes
                if self._state.judge(result.partitions, result.version) is Outcome.MERGE:
                    self._merge(handle, result)
            if handle.task is None:  # a flush: what it did not return is not coming
                self._state.lost_held(handle.expected)
            else:  # the input may let its frames go (a stream's: the source goes on)
                for idx in self._input.release(handle.task.idx):
                    self._state.forget(idx)
        if self._state.needs_flush:
            for flush in self._executor.flush(self.run_id):
                self._state.submitted(flush)
            if not self._state.in_flight:  # no worker left to ask
                self._state.lost_held(set(self._state.held))

    def _publish(self, finished: bool = False) -> None:
        if not should_publish(merged_since=self._state.merged_since_publish, wanted=self._channel.wants_snapshot,
                              finished=finished, final_only=self._final_only):
            return
        assert self._acc is not None
        self._channel.publish(self._acc.snapshot(finished=finished))
        self._coalesced += self._state.merged_since_publish - 1
        self._state.published()

    # -- steps of the phases ---------------------------------------------------
    def _task_results(self, handle: TaskHandle) -> list[PartitionResult] | None:
        """The handle's results, or None if its task is to run again (its worker died or lacked a value)."""
        task = handle.task
        try:
            return self._executor.result(handle)
        except WorkerLost as e:
            self._state.lost_held(e.held)
            if task is not None and self._state.worker_lost(task) is Outcome.GIVE_UP:
                raise ExecutorError(
                    f"{task.describe()} failed {MAX_RETRIES} times because its worker died: {e}"
                ) from e
        except TaskNotRun:
            if task is not None:
                self._state.not_run(task)
        return None

    def _merge(self, handle: TaskHandle, result: PartitionResult) -> None:
        assert self._acc is not None
        if result.covers == []:
            where = handle.describe()
        elif len(result.covers) == 1:  # a worker's segment of one partition: name the partition
            where = f"{self._state.describe_partition(result.covers[0])}, held on worker {result.worker}"
        else:
            where = f"partitions {result.covers} (merged on worker {result.worker})"
        with tracing.child_span("raytile.merge", {"raytile.partition": result.idx}):
            self._acc.merge(result, where)
        self._frames_merged += self._state.frames_of(result.partitions)
        if self._progress is not None:
            self._progress.partition_done(self.run_id, self._acc.done)

    def _stop_in_flight(self) -> None:
        if self._state.in_flight:
            try:
                self._executor.cancel(self._state.in_flight)
            except Exception:  # noqa: BLE001
                pass
            self._state.in_flight.clear()

    def _on_tile(self, run_id: str, frames: int) -> None:
        self._frames_reported += frames
        if self._progress is not None:
            self._progress.advance(run_id, frames)
