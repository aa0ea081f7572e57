"""`WorkerActor`: a Ray actor that holds one CPU slot or one GPU and runs partition tasks.

Every task goes through :func:`raytile.runtime.part_runner.run_partition`,
the same code the inline executor runs. The actor

- limits its native thread pools (BLAS/OpenMP through threadpoolctl, numba)
  to its share of the machine and passes ``threads_per_worker`` on;
- keeps a run's parameters (per ``(run_id, version)``) and in-memory
  partitions' frames between tasks (:mod:`raytile.actors.cache`): a task
  carries their object refs only the first time this actor sees them, and
  short keys afterwards. Frames come back from the object store as read-only
  numpy views of its shared memory (zero-copy);
- reports per-tile progress to the Context's progress actor
  (:mod:`raytile.actors.progress`);
- skips the tasks of a cancelled run as they start, and stops a running
  one at its next tile (``cancel_run`` sets a flag that is checked per tile);
- returns UDF errors as values, so the driver re-raises the original
  :class:`~raytile.common.errors.UDFException` with the worker's traceback;
- records a ``raytile.task`` span under the run's propagated span context and
  ships finished spans back with the result (:mod:`raytile.actors.worker_tracing`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import socket
import time
import traceback
from collections import OrderedDict
from typing import Any

import ray

from raytile.actors.cache import CacheMiss, ValueCache, unpack
from raytile.actors.frame_slab import SlabFrames, SlabReader
from raytile.actors.progress import TileReporter
from raytile.actors.reply import Reply
from raytile.actors.task_message import TaskMessage
from raytile.actors.worker_tracing import WorkerTracing
from raytile.actors.worker_warnings import recording
from raytile.common.errors import ExecutorError
from raytile.io.dataset import TakesFrames
from raytile.runtime.params import PartitionResult, PartitionTask, RunParams

__all__ = ["WorkerActor", "PARAMS_CACHE", "DATA_CACHE", "CANCELLED_RUNS", "HELD_RUNS"]

#: Params versions a worker keeps resolved.
PARAMS_CACHE = 8
#: In-memory partitions a worker keeps as zero-copy views of the object store. A view pins its object;
#: the driver tells the worker to drop the views of a data set that was garbage-collected.
DATA_CACHE = 4096
#: Cancelled runs a worker remembers (their queued tasks return unrun).
CANCELLED_RUNS = 1024
#: Runs a worker holds merged results of (the oldest is dropped beyond; its coordinator re-runs them).
HELD_RUNS = 64


class _Cancelled(Exception):
    pass


class _Answer(Exception):
    """A phase of ``run_task`` ends the task early with ``reply`` (internal)."""

    def __init__(self, reply: Reply):
        super().__init__(reply.status.value)
        self.reply = reply


def _limit_threads(n: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["MKL_NUM_THREADS"] = str(n)
    os.environ["OPENBLAS_NUM_THREADS"] = str(n)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n)
    except Exception:  # threadpoolctl missing or no native pools loaded
        pass
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]  # set at import
    except Exception:
        pass


class WorkerActor:
    """One worker slot (CPU) or one GPU. Created by :class:`RayExecutor` with ``ray.remote`` options.

    Tasks run one at a time in the default concurrency group; ``cancel_run``
    and ``ping`` run in the ``control`` group beside them.
    """

    #: Ray concurrency groups of the actor (see ``RayExecutor``).
    CONCURRENCY_GROUPS = {"control": 1}

    def __init__(self, kind: str, threads: int, name: str):
        self.kind = kind
        self.threads = max(1, int(threads))
        self.name = name
        _limit_threads(self.threads)
        from raytile.runtime import part_runner  # noqa: F401  (import cost paid once, at start)
        from raytile.udf.integer_tiles import load_kernels

        load_kernels()  # the integer tile kernels too, not in the first run
        from raytile.io.backends.lease import set_unleased_policy

        set_unleased_policy("map")  # a file that cannot be leased is mapped: a SIGBUS here costs a retry

        self._params = ValueCache("params", PARAMS_CACHE, _fetch_params)
        self._data = ValueCache("data", DATA_CACHE, ray.get)
        self._slabs = SlabReader()  # the driver's shared-memory slots a stream's partitions come in
        self._cancelled_runs: "OrderedDict[str, None]" = OrderedDict()
        self._mergers: "OrderedDict[str, Any]" = OrderedDict()  # run_id -> SegmentMerger of held results
        self._last_sent: "OrderedDict[str, float]" = OrderedDict()  # run_id -> when results were last sent
        self._tracing = WorkerTracing()
        self._host = socket.gethostname()

    @ray.method(concurrency_group="control")
    def ping(self) -> dict:
        return {"name": self.name, "kind": self.kind, "pid": os.getpid(), "host": self._host,
                "node_id": ray.get_runtime_context().get_node_id(),
                "threads": self.threads, "data_cached": len(self._data), "params_cached": len(self._params)}

    @ray.method(enable_task_events=False)  # one call a partition: no task events kept (see ray_start.py)
    def run_task(self, message: bytes | TaskMessage, shipped: dict[str, Any] | None = None,
                 progress: Any = None, frames: Any = None) -> Reply:
        """Run one partition. Returns a :class:`Reply`: OK with ``[PartitionResult, ...]`` (its result,
        or merged segments of several, see ``_deliver``), HELD with the partition's index, CANCELLED,
        or ERROR with the exception; each with the spans the task finished.

        ``message`` is a :class:`~raytile.actors.task_message.TaskMessage`,
        packed (see :mod:`raytile.actors.cache`; the message itself if it
        holds Ray object refs); ``shipped`` holds, when this worker
        gets them for the first time, the run's parameters (packed, or their
        object ref if they are large) and the object ref of an in-memory
        partition's frames. If it holds neither for a key, the task does not
        run and returns a MISSING reply naming ``(kind, key)``. ``frames``: a stream partition's frames
        (Ray resolves the object ref it was passed as into a zero-copy view, released with the task), or
        a :class:`~raytile.actors.frame_slab.SlabFrames` slot of the driver's node, read as a view too.

        The phases, each of which may end the task with its reply: open the
        message, resolve its cached values, skip a cancelled run's task,
        attach the frames, run the partition, deliver its result.
        """
        with recording() as given:  # the task's warnings go back with its reply (see worker_warnings)
            reply = self._run_phases(message, shipped, progress, frames)
        return dataclasses.replace(reply, warnings=tuple(given)) if given else reply

    def _run_phases(self, message: bytes | TaskMessage, shipped: dict[str, Any] | None, progress: Any,
                    frames: Any) -> Reply:
        try:
            msg = self._open(message)
            params, data = self._resolve(msg, shipped or {})
            if params.run_id in self._cancelled_runs:  # queued before its run was cancelled: skip it
                return Reply.cancelled()
            self._attach_frames(msg.task, data, frames)
            result, spans = self._run(msg.task, params, progress)
            return self._reply(msg.task, params, result, spans)
        except _Answer as answer:
            return answer.reply

    def _open(self, message: bytes | TaskMessage) -> TaskMessage:
        try:
            return TaskMessage.unpacked(message)
        except Exception as e:
            raise _Answer(Reply.error(
                ExecutorError(f"worker {self.name} cannot unpickle a task: {type(e).__name__}: {e}"))) from None

    def _resolve(self, msg: TaskMessage, shipped: dict[str, Any]) -> tuple[RunParams, Any]:
        """The run's parameters and the partition's shared frames (None if it has none), from this
        worker's caches or from what came ``shipped``; a MISSING reply if the cache lacks one."""
        try:
            params = self._params.resolve(msg.params_key, shipped.get("params"))
            data = None if msg.data_key is None else self._data.resolve(msg.data_key, shipped.get("data"))
        except CacheMiss as e:
            raise _Answer(Reply.missing(e.kind, e.key)) from None
        except Exception as e:
            raise _Answer(Reply.error(ExecutorError(
                f"{msg.task.describe()}: cannot read the run parameters or data: {e}"))) from None
        return params, data

    def _attach_frames(self, task: PartitionTask, data: Any, frames: Any) -> None:
        """Give the partition the frames that came with the task: shared in-memory frames, a slab slot
        of the driver's node (mapped here), or a stream partition's frames."""
        part = task.partition
        if data is None and frames is None:  # it reads its own frames (files)
            return
        assert isinstance(part, TakesFrames), task.describe()
        if data is not None:
            part.data = data
        elif isinstance(frames, SlabFrames):
            try:
                part.data = self._slabs.view(frames)
            except OSError as e:
                raise _Answer(Reply.error(
                    ExecutorError(f"{task.describe()}: cannot map its frames ({frames!r}): {e}"))) from None
        elif frames is not None:
            part.data = frames

    def _run(self, task: PartitionTask, params: RunParams, progress: Any) -> tuple[PartitionResult, list[dict]]:
        """Run the partition (in a ``raytile.task`` span when the run is traced), checking for a cancel
        and reporting progress per tile; its result and the spans it finished. The partition lets go
        of its frames at the end."""
        run_id = params.run_id
        cancelled_runs = self._cancelled_runs
        reporter = TileReporter(progress, run_id) if progress is not None else None

        def on_tile(frames: int) -> None:
            if run_id in cancelled_runs:
                raise _Cancelled()
            if reporter is not None:
                reporter.add(frames)

        from raytile.runtime import tracing
        from raytile.runtime.part_runner import run_partition

        try:
            if params.trace_context:
                with tracing.attached(params.trace_context):
                    with self._tracing.tracer().start_as_current_span(
                        "raytile.task",
                        attributes={"raytile.partition": task.idx, "raytile.worker": self.name,
                                    "raytile.pid": os.getpid(), "raytile.host": self._host,
                                    "raytile.params_version": params.version},
                    ):
                        result = run_partition(task, params, self.kind, self.threads, on_tile)
            else:
                result = run_partition(task, params, self.kind, self.threads, on_tile)
        except _Cancelled:
            raise _Answer(Reply.cancelled(self._tracing.collect())) from None
        except BaseException as e:  # noqa: BLE001  (delivered to the consumer)
            spans = self._tracing.collect() if params.trace_context else []
            raise _Answer(Reply.error(_picklable(e, task), spans)) from None
        finally:
            if reporter is not None:
                reporter.close()
            if isinstance(task.partition, TakesFrames):
                task.partition.data = None
        result.worker = self.name
        return result, (self._tracing.collect() if params.trace_context else [])

    def _reply(self, task: PartitionTask, params: RunParams, result: PartitionResult, spans: list[dict]) -> Reply:
        """The task's reply: its result (or merged segments) now, or HELD if merged into held state."""
        try:
            delivered = self._deliver(task, params, result)
        except BaseException as e:  # noqa: BLE001  (a UDF's merge raised: delivered to the consumer)
            return Reply.error(_picklable(e, task), spans)
        if delivered is None:
            return Reply.held(task.idx, spans)
        return Reply.ok(delivered, spans)

    def _deliver(self, task, params, result) -> list | None:
        """The results to send now, or None if ``result`` was merged into this worker's held state.

        With ``params.merge_interval_s`` set, partitions are merged here
        (:mod:`raytile.runtime.segments`) and sent at most that often, the
        run's first partition on this worker at once (with an infinite
        interval, only when the coordinator flushes at the end); an older
        parameters version's state goes with the first task of the new version.
        """
        from raytile.runtime.segments import SegmentMerger, merges_pairwise

        interval = params.merge_interval_s
        if interval is None or not merges_pairwise(params.udfs):
            return [result]
        run_id = params.run_id
        out = []
        merger = self._mergers.get(run_id)
        if merger is not None and merger.version != params.version:
            out = [seg.as_result(self.name) for seg in merger.take()]
            merger = None
        if merger is None:
            merger = self._mergers[run_id] = SegmentMerger(params)
            while len(self._mergers) > HELD_RUNS:
                self._mergers.popitem(last=False)  # the coordinator re-runs what a flush does not return
        merger.add(result, task.partition.roi_offset(params.roi), f"{task.describe()} on worker {self.name}")
        now = time.monotonic()
        last = self._last_sent.get(run_id, -math.inf if math.isfinite(interval) else now)
        if now - last >= interval:
            out += [seg.as_result(self.name) for seg in merger.take()]
            self._last_sent[run_id] = now
            while len(self._last_sent) > HELD_RUNS:
                self._last_sent.popitem(last=False)
        return out or None

    @ray.method(enable_task_events=False)
    def flush_run(self, run_id: str) -> Reply:
        """The run's held results (merged segments), as an OK reply of ``[results]``; runs after the
        run's tasks queued before it (the default group keeps the order)."""
        merger = self._mergers.pop(run_id, None)
        segments = merger.take() if merger is not None else []
        return Reply.ok([seg.as_result(self.name) for seg in segments])

    @ray.method(concurrency_group="control", enable_task_events=False)
    def cancel_run(self, run_id: str) -> None:
        """Stop this run's tasks: the running one at its next tile, queued ones as they start.

        Runs beside the task, in the control group. (Not ``ray.cancel`` on
        queued calls: that leaves a gap in the actor's call order that Ray
        waits 30 s for.)
        """
        self._cancelled_runs[run_id] = None
        self._mergers.pop(run_id, None)
        while len(self._cancelled_runs) > CANCELLED_RUNS:
            self._cancelled_runs.popitem(last=False)

    @ray.method(concurrency_group="control")
    def forget_values(self, kind: str, keys: list) -> int:
        """Drop cached values the driver released (``kind``: "data"); returns how many are still kept."""
        cache = self._data if kind == "data" else self._params
        cache.forget(keys)
        return len(cache)

    def run_function(self, fn, args) -> Reply:
        """``fn(*args)`` in this worker, as an OK reply of its value or an ERROR reply of its exception."""
        try:
            return Reply.ok(fn(*args))
        except BaseException as e:  # noqa: BLE001
            return Reply.error(_picklable(e, None))


def _fetch_params(shipped: Any) -> Any:
    """Run parameters from what the driver shipped: packed bytes (small ones) or an object ref."""
    return unpack(shipped) if isinstance(shipped, bytes) else ray.get(shipped)


def _picklable(exc: BaseException, task) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        where = f" in {task.describe()}" if task is not None else ""
        return ExecutorError(f"{type(exc).__name__}: {exc}{where}\n\nWorker traceback:\n{tb}")


