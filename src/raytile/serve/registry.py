"""The runs one replica serves: each a `ServedRun` around a `UDFRun`, and the `RunRegistry` of them.

A served run is one viewer of the run's channel: ``async for`` over its
``UDFRun``, in a task of the replica's event loop. The newest result and
how many came are the viewer's own (``UDFRun.last``, ``UDFRun.taken``): the
served run keeps no copy, only what HTTP clients learn besides (status,
error, patches) and a wake-up for the streams, which read the newest result
at their own rate, so a slow client never makes the server queue snapshots
(latest wins, as in the run itself). The end of the run's coordinator is
awaited with one ``join`` (in a thread), not polled. Its id is the
run's id (``UDFRun.run_id``), the one ``raytile runs`` lists and
``Context.attach`` takes. At most ``max_runs`` runs go on at once (429
beyond); finished runs stay for their results until ``keep_finished``
newer ones ended.

>>> registry = RunRegistry(max_runs=8, keep_finished=32)
>>> registry.reserve()            # raises TooManyRuns when full
>>> served = registry.add(ServedRun(run, ["sum"], rate_hz=10.0))
"""

from __future__ import annotations

import asyncio
import math
import re
import statistics
import time
import traceback
from typing import Any, Sequence

import anyio.to_thread

from raytile.common.errors import UDFException, UDFRunCancelled
from raytile.runtime.results import UDFResults
from raytile.runtime.run import UDFRun
from raytile.serve.errors import NotFound, TooManyRuns

__all__ = ["ServedRun", "RunRegistry", "retry_after_s", "STATUS_RUNNING", "STATUS_FINISHED", "STATUS_CANCELLED", "STATUS_ERROR",
           "error_info"]

#: A served run's ``status`` as clients read it (JSON strings; not the runtime's FINISHED end-of-run sentinel).
STATUS_RUNNING, STATUS_FINISHED, STATUS_CANCELLED, STATUS_ERROR = "running", "finished", "cancelled", "error"

#: How long a served run waits for its coordinator to release the run's state after its end.
RELEASE_TIMEOUT_S = 30.0

_UDF_ERROR = re.compile(r"^(?P<udf>\w+)\.(?P<method>\w+) raised .*? while processing partition (?P<partition>\d+)",
                        re.S)


def error_info(exc: BaseException) -> dict[str, Any]:
    """What a client learns of a failed run: type, message, and the UDF and partition when known."""
    message = str(exc.args[0]) if exc.args else str(exc)
    info: dict[str, Any] = {"type": type(exc).__name__, "message": message}
    m = _UDF_ERROR.search(message)
    if m:
        info.update(udf=m["udf"], method=m["method"], partition=int(m["partition"]))
    if isinstance(exc, UDFException) and exc.worker_traceback:
        info["traceback"] = exc.worker_traceback
    else:
        info["traceback"] = "".join(traceback.format_exception_only(type(exc), exc))
    return info


class ServedRun:
    """One run: its ``UDFRun`` (whose newest result it shows), status and error; streams wait on :meth:`wait_newer`."""

    def __init__(self, run: UDFRun, udf_names: Sequence[str], rate_hz: float, sig_shape: tuple[int, ...] = (),
                 specs: Sequence[Any] = (), warnings: Sequence[str] = ()):
        self.id = run.run_id  # the run's one id: `raytile runs` and Context.attach know it by it
        #: DataSetWarning messages of opening the run's data set, sent with every stream message
        self.warnings = list(warnings)
        self.run = run
        self.udf_names = list(udf_names)
        self.specs = list(specs)
        self.sig_shape = tuple(sig_shape)
        self.rate_hz = rate_hz
        self.status = STATUS_RUNNING
        self.error: dict[str, Any] | None = None
        self.cancel_reason: str | None = None
        self.patches = 0
        self.created = time.time()
        self.ended: float | None = None
        #: True once the run's coordinator is over and released its state (``GET /v1/runs/{id}``)
        self.released = False
        self._changed = asyncio.Event()  # replaced (after being set) on every change
        self._follower: asyncio.Task | None = None

    @property
    def over(self) -> bool:
        return self.status != STATUS_RUNNING

    @property
    def latest(self) -> UDFResults | None:
        """The newest result the run gave this viewer (None before the first)."""
        return self.run.last

    @property
    def seq(self) -> int:
        """The number of the newest message: the results the run gave, and one for its end."""
        return self.run.taken + (1 if self.over else 0)

    def start(self) -> None:
        """Follow the run: a task of the running event loop, one viewer of the run (``async for``:
        the waits, and the join of a cancelled run's coordinator, happen in threads)."""
        self._follower = asyncio.get_running_loop().create_task(self._follow(), name=f"raytile-serve-{self.id[:8]}")

    async def _follow(self) -> None:
        status, error = STATUS_FINISHED, None
        try:
            async for _ in self.run:
                self._wake()
        except UDFRunCancelled:
            status = STATUS_CANCELLED
        except Exception as e:  # the run failed: the client gets it as the final message
            status, error = STATUS_ERROR, error_info(e)
        self.status, self.error, self.ended = status, error, time.time()
        self._wake()
        # the coordinator releases its state right after the end: wait for it once, in a thread
        self.released = await anyio.to_thread.run_sync(self.run.join, RELEASE_TIMEOUT_S)

    def _wake(self) -> None:
        """In the event loop: a new result or the end came; wake every waiting stream."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_newer(self, seq: int) -> None:
        """Return once there is a message newer than ``seq`` (a new result or the run's end)."""
        while self.seq <= seq:
            await self._changed.wait()

    async def wait_over(self, timeout: float | None = None) -> bool:
        """Wait for the run's end; whether it ended within ``timeout``."""
        async def over() -> None:
            while not self.over:
                await self._changed.wait()

        try:
            await asyncio.wait_for(over(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def cancel(self, reason: str) -> None:
        """Cancel the run (DELETE, a client gone); the pump records the end."""
        if not self.over:
            self.cancel_reason = self.cancel_reason or reason
            self.run.cancel()

    def status_json(self) -> dict[str, Any]:
        """``GET /v1/runs/{id}``: status, progress, versions, and whether the run's coordinator is gone."""
        part = self.latest
        return {
            "run_id": self.id, "status": self.status, "udfs": self.udf_names, "seq": self.seq,
            "partitions_done": part.partitions_done if part else 0,
            "partitions_total": part.partitions_total if part else None,
            "damage_fraction": part.damage.fraction if part else 0.0,
            "param_versions": {str(k): v for k, v in part.param_versions.items()} if part else {},
            "coalesced": self.run.coalesced, "patches": self.patches,
            "released": self.released, "error": self.error, "cancel_reason": self.cancel_reason,
            "created": self.created, "ended": self.ended,
        }


#: The longest ``Retry-After`` a 429 gives (s): a client told to wait longer would rather poll.
MAX_RETRY_AFTER_S = 30


def retry_after_s(running_for: Sequence[float], durations: Sequence[float]) -> int:
    """Whole seconds until a run slot likely frees: the typical run (the median of the ``durations``
    of runs that ended, 1 s if none did) less how long the oldest of the runs going on (``running_for``)
    has run already; at least 1, at most :data:`MAX_RETRY_AFTER_S`.

    >>> retry_after_s([4.0, 1.0], [6.0, 5.0, 7.0])
    2
    """
    typical = statistics.median(durations) if durations else 1.0
    left = typical - max(running_for, default=0.0)
    return int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(left))))


class RunRegistry:
    """The runs of one replica by id; counts runs going on against ``max_runs``."""

    def __init__(self, max_runs: int, keep_finished: int):
        self.max_runs = max_runs
        self.keep_finished = keep_finished
        self.runs: dict[str, ServedRun] = {}
        self._reserved = 0

    def active(self) -> list[ServedRun]:
        return [r for r in self.runs.values() if not r.over]

    def reserve(self) -> None:
        """Take a slot for a run being set up; raises TooManyRuns (429) if none is free, with the
        seconds until one likely is (:func:`retry_after_s`)."""
        active = self.active()
        if len(active) + self._reserved >= self.max_runs:
            now = time.time()
            wait = retry_after_s([now - r.created for r in active],
                                 [r.ended - r.created for r in self.runs.values() if r.ended is not None])
            raise TooManyRuns(None, f"{self.max_runs} runs are going on already; retry in {wait} s, when one "
                                    "ends", retry_after_s=wait)
        self._reserved += 1

    def release(self) -> None:
        """Give back a reserved slot (the run was added, or failed to start)."""
        self._reserved = max(0, self._reserved - 1)

    def add(self, served: ServedRun) -> ServedRun:
        self.runs[served.id] = served
        served.start()
        self._forget_old()
        return served

    def get(self, run_id: str) -> ServedRun:
        served = self.runs.get(run_id)
        if served is None:
            raise NotFound("run_id", f"no run {run_id!r} on this server")
        return served

    def _forget_old(self) -> None:
        ended = sorted((r for r in self.runs.values() if r.over), key=lambda r: r.ended or 0)
        for r in ended[: max(0, len(ended) - self.keep_finished)]:
            del self.runs[r.id]

    def cancel_all(self, reason: str) -> None:
        for r in self.active():
            r.cancel(reason)
