"""`Coordinator`: dispatches a run's tasks, merges results, streams `UDFResults`.

It runs in one thread in the driver per run and talks to any
:class:`~raytile.runtime.executor.Executor`. Partial results go to an
outbox (a queue) that :class:`~raytile.runtime.run.UDFRun` reads from sync
and async code alike. See docs/coordinator.md for why a driver thread and
not an async actor.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Sequence

from raytile.common.errors import ExecutorError, UDFRunCancelled
from raytile.runtime.executor import Executor, TaskHandle, TaskNotRun, WorkerLost
from raytile.runtime.plan import RunPlan
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import ResultAccumulator, UDFResults
from raytile.runtime import tracing

#: How often a task may be retried after its worker died.
MAX_RETRIES = 3
#: The longest one wait for task completion blocks. Only a safety net: executors that support it
#: (Ray) end the wait as soon as a task finishes, and patches and cancels end it at once too.
POLL_S = 0.2


@dataclass
class ParamsVersion:
    version: int
    handle: Any


class _Finished:
    """Outbox marker: the run is over."""


FINISHED = _Finished()


class Coordinator:
    """Drives one run: ``start()`` it, read ``outbox``; ``patch``/``cancel`` from any thread."""

    def __init__(self, executor: Executor, plan: RunPlan, progress: ProgressReporter | None = None,
                 span: Any = None):
        self._executor = executor
        self._span = span  # the run's span, opened by the Context around planning (or here)
        self._plan = plan
        self._progress = progress
        self.outbox: "queue.Queue[Any]" = queue.Queue()
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._wakeup = threading.Event()  # set by task completions, patches and cancels (see Executor.start_run)
        self._final_only = False
        self._in_flight: list[TaskHandle] = []
        self._patches: list[tuple[list[dict], bool]] = []
        self._thread = threading.Thread(target=self._main, name=f"raytile-run-{plan.params.run_id[:8]}",
                                        daemon=True)
        self._acc = ResultAccumulator(
            [u.copy() for u in plan.udfs], plan.params.dataset_shape, plan.params.roi, plan.metas(),
            plan.partition_offsets, plan.total_partitions,
        )

    @property
    def run_id(self) -> str:
        return self._plan.params.run_id

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def patch(self, patches: list[dict], recompute: bool) -> None:
        with self._lock:
            self._patches.append((patches, recompute))
        self._wakeup.set()

    def cancel(self) -> None:
        self._cancelled.set()
        self._wakeup.set()

    def only_final_result(self) -> None:
        """Put only the final result into the outbox from now on (the caller waits for the end anyway).

        Saves a snapshot of every result buffer per partition, and waking the
        consumer for each; merging and progress are unchanged.
        """
        self._final_only = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- the loop ------------------------------------------------------------
    def _main(self) -> None:
        span = self._span if self._span is not None else tracing.start_span("raytile.run")
        span.set_attribute("raytile.run_id", self.run_id)
        span.set_attribute("raytile.partitions", len(self._plan.tasks))
        try:
            with tracing.use_span(span):
                self._loop(span)
        except BaseException as e:  # handed to the consumer
            if self._in_flight:  # stop the run's other tasks
                try:
                    self._executor.cancel(self._in_flight)
                except Exception:  # noqa: BLE001
                    pass
                self._in_flight = []
            tracing.record_error(span, e)
            self.outbox.put(e)
        finally:
            span.end()
            try:
                self._executor.finish_run(self.run_id)
            except Exception:  # noqa: BLE001  (progress flush is best effort)
                pass
            if self._progress is not None:
                self._progress.finish(self.run_id)
            self.outbox.put(FINISHED)

    def _loop(self, span) -> None:
        ex = self._executor
        plan = self._plan
        ex.start_run(self.run_id, self._wakeup)
        params = replace(plan.params, trace_context=tracing.inject_context())
        version = ParamsVersion(0, ex.put_params(params))
        current_params = params
        pending = deque(plan.tasks)
        needed_version: dict[int, int] = {t.idx: 0 for t in plan.tasks}
        in_flight: list[TaskHandle] = []
        self._in_flight = in_flight
        retries: dict[int, int] = {}
        sink = self._on_tile if self._progress is not None else None
        if self._progress is not None:
            self._progress.start(self.run_id, sum(t.num_frames for t in plan.tasks), len(plan.tasks))

        while pending or in_flight:
            if self._cancelled.is_set():
                ex.cancel(in_flight)
                in_flight.clear()
                raise UDFRunCancelled(f"run {self.run_id[:8]} was cancelled")
            with self._lock:
                patches, self._patches = self._patches, []
            for patch_list, recompute in patches:
                current_params, version = self._apply_patch(current_params, version, patch_list)
                if recompute:
                    self._acc.reset()
                    queued = {t.idx for t in pending}
                    for task in plan.tasks:
                        needed_version[task.idx] = version.version
                        busy = any(h.task.idx == task.idx for h in in_flight)
                        if task.idx not in queued and not busy:
                            pending.append(task)
            while pending and len(in_flight) < ex.max_in_flight:
                task = pending.popleft()
                in_flight.append(ex.submit(task, version.handle, version.version, sink))
            done = ex.wait(in_flight, POLL_S)
            for handle in done:
                in_flight.remove(handle)
                task = handle.task
                try:
                    result = ex.result(handle)
                except WorkerLost as e:
                    retries[task.idx] = retries.get(task.idx, 0) + 1
                    if retries[task.idx] > MAX_RETRIES:
                        raise ExecutorError(
                            f"{task.describe()} failed {MAX_RETRIES} times because its worker died: {e}"
                        ) from e
                    pending.appendleft(task)
                    continue
                except TaskNotRun:
                    pending.appendleft(task)
                    continue
                if result.version < needed_version[task.idx]:
                    pending.append(task)  # computed with parameters a recompute patch replaced
                    continue
                with tracing.child_span("raytile.merge", {"raytile.partition": task.idx}):
                    self._acc.merge(result)
                if self._progress is not None:
                    self._progress.partition_done(self.run_id, self._acc.done)
                finished = not pending and not in_flight
                if finished or not self._final_only:
                    self.outbox.put(self._acc.snapshot(finished=finished))
        if not plan.tasks:
            self.outbox.put(self._acc.snapshot(finished=True))

    def _apply_patch(self, params, version: ParamsVersion, patch_list: Sequence[dict]):
        if len(patch_list) != len(params.udfs):
            raise ValueError(f"update_parameters needs one dict per UDF ({len(params.udfs)}), got {len(patch_list)}")
        udfs = []
        for udf, patch in zip(params.udfs, patch_list):
            new = udf.copy_for_partition(0, params.dataset_shape.nav.size, None)
            if patch:
                new.update_parameters(patch)
            udfs.append(new)
        self._acc.update_udf_params(patch_list)
        new_params = replace(params, udfs=udfs, version=version.version + 1)
        return new_params, ParamsVersion(new_params.version, self._executor.put_params(new_params))

    def _on_tile(self, run_id: str, frames: int) -> None:
        if self._progress is not None:
            self._progress.advance(run_id, frames)
