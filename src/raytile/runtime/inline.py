"""`InlineExecutor`: runs tasks in the calling process, one after the other.

It drives the same coordinator and part runner as the Ray executor, which
makes it the debugging executor (breakpoints and print work) and lets
most tests run without a cluster.

Tasks run with one BLAS thread (as a Ray worker with one CPU does): the
inline executor shares its process with the driver, a stream's feeder and
a live receiver, and a multithreaded BLAS on a tile's small products spins
against them. Measured on 2 shared cores (ring mask, 16-frame tiles of
256x256): 1,500 frames/s with OpenBLAS' 2 threads, 66,000 with one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Iterator, Sequence

from raytile.io.dataset import TakesFrames
from raytile.runtime import tracing
from raytile.runtime.executor import Executor, ProgressSink, TaskHandle, TaskNotRun
from raytile.runtime.params import PartitionResult, PartitionTask
from raytile.runtime.part_runner import run_partition

__all__ = ["InlineExecutor"]

#: The machine's CPUs, the inline worker's ``threads_per_worker`` (read once: ``os.cpu_count()`` reads
#: /sys at every call).
_CPUS = os.cpu_count()
_blas_lock = threading.Lock()
_blas: list[Any] = []  # the BLAS libraries' threadpoolctl controllers (found again when modules were imported)
_blas_modules = -1  # len(sys.modules) when they were found
_blas_tasks = 0  # inline tasks running now, in any thread
_blas_saved: dict[str, tuple[Any, int]] = {}  # library path -> (controller, its thread count before the tasks)


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread while inline tasks run (a no-op without threadpoolctl).

    The count is process-wide and inline runs may overlap in several threads: the first task to start
    sets each BLAS library to one thread (unless it is at 1 already) and the last one to end sets the
    counts back. Two or three foreign calls, where ``ThreadpoolController.limit`` makes a dozen per
    task (each releases and takes back the GIL, which the receiver and feeder threads of a live run
    hold often: measured about 50 us per task there). The libraries are looked up again when modules
    were imported since (scipy brings a BLAS of its own beside numpy's)."""
    global _blas, _blas_modules, _blas_tasks
    with _blas_lock:
        if _blas_modules != len(sys.modules):
            _blas_modules = len(sys.modules)
            try:
                from threadpoolctl import ThreadpoolController

                _blas = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:  # threadpoolctl missing
                _blas = []
        for lib in _blas:
            if lib.filepath not in _blas_saved:
                threads = lib.get_num_threads()
                if threads is not None and threads != 1:
                    lib.set_num_threads(1)
                    _blas_saved[lib.filepath] = (lib, threads)
        _blas_tasks += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_tasks -= 1
            if _blas_tasks == 0:
                for lib, threads in _blas_saved.values():
                    lib.set_num_threads(threads)
                _blas_saved.clear()


class _Cancelled(Exception):
    """Raised at a tile of a task whose run was cancelled (internal)."""


class _InlineHandle(TaskHandle):
    def __init__(self, task, version, params, progress, cancelled: set[str]):
        super().__init__(task, version)
        self.params = params
        self.progress = progress
        self.cancelled_runs = cancelled  # the executor's: run ids cancelled while their task runs
        self.outcome: PartitionResult | None = None
        self.error: BaseException | None = None
        self.stopped = False  # its run was cancelled at one of its tiles: it did not run to its end
        self.done = False

    def run(self) -> None:
        if self.done:
            return
        task = self.task
        assert task is not None  # the inline executor has no flushes
        run_id, sink, cancelled = self.params.run_id, self.progress, self.cancelled_runs

        def on_tile(frames: int) -> None:
            if run_id in cancelled:  # Ctrl-C or run.cancel(): stop here, not at the partition's end
                raise _Cancelled()
            if sink is not None:
                sink(run_id, frames)
        if task.frames is not None:  # a stream's partition: its frames came with it
            assert isinstance(task.partition, TakesFrames), task.describe()
            task.partition.data = task.frames
        try:
            with _one_blas_thread(), tracing.attached(self.params.trace_context), tracing.child_span(
                "raytile.task", {"raytile.partition": task.idx, "raytile.worker": "inline",
                                 "raytile.pid": os.getpid(), "raytile.params_version": self.params.version},
            ):
                self.outcome = run_partition(task, self.params, on_tile=on_tile, threads_per_worker=_CPUS)
        except _Cancelled:
            self.stopped = True
        except BaseException as e:  # delivered by result()
            self.error = e
        self.done = True


class InlineExecutor(Executor):
    """Executes each task when the coordinator waits for it (one at a time: the base's one worker)."""

    def __init__(self) -> None:
        self._wakeups: dict[str, threading.Event] = {}
        self._cancelled: set[str] = set()

    def start_run(self, run_id: str, wakeup: threading.Event) -> None:
        self._wakeups[run_id] = wakeup

    def cancel_run(self, run_id: str) -> None:
        """The running task of ``run_id`` stops at its next tile (called from the consumer's thread)."""
        if run_id in self._wakeups:  # a run over already leaves nothing behind
            self._cancelled.add(run_id)

    def finish_run(self, run_id: str) -> None:
        self._wakeups.pop(run_id, None)
        self._cancelled.discard(run_id)

    def put_params(self, params: Any) -> Any:
        return params

    def submit(self, task: PartitionTask, params_handle: Any, version: int,
               progress: ProgressSink | None = None) -> TaskHandle:
        return _InlineHandle(task, version, params_handle, progress, self._cancelled)

    def wait(self, run_id: str, handles: Sequence[TaskHandle], timeout: float) -> list[TaskHandle]:
        if not handles:  # nothing to run (a stream's next partition has not arrived): sleep until woken
            wakeup = self._wakeups.get(run_id)
            if wakeup is not None:
                wakeup.wait(timeout)
            return []
        first = handles[0]
        assert isinstance(first, _InlineHandle)  # this executor's own (submit made it)
        first.run()
        return [first]

    def result(self, handle: TaskHandle) -> list[PartitionResult]:
        assert isinstance(handle, _InlineHandle) and handle.done
        if handle.stopped:  # its run was cancelled: the coordinator ends the run at its next turn
            raise TaskNotRun(f"{handle.describe()} stopped: its run was cancelled")
        if handle.error is not None:
            raise handle.error
        assert handle.outcome is not None
        return [handle.outcome]
