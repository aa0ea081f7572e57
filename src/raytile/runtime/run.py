"""`UDFRun`: the handle ``Context.run_udf_iter`` returns.

Iterate it (``for`` or ``async for``) for partial :class:`UDFResults`;
``update_parameters`` patches UDF parameters while it runs; ``cancel``
stops it. Leaving the loop early cancels the run, unless it is a viewer's
(``Context.attach``) or the run is detached.

Partial results are cumulative and latest-wins: a consumer slower than the
run skips intermediate ones (``UDFResults.partitions_done`` jumps) instead
of making them pile up.
"""

from __future__ import annotations

from types import TracebackType
from typing import AsyncIterator, Awaitable, Callable, Iterator, NoReturn, Sequence

import anyio
import anyio.to_thread

from raytile.common.errors import RunEnded, UDFRunCancelled
from raytile.runtime.host import RunSource
from raytile.runtime.channel import Terminal
from raytile.runtime.results import UDFResults

__all__ = ["UDFRun"]

#: What ``throw``/``athrow`` take first, as a generator's ``throw``: an exception class or instance.
ThrownType = type[BaseException] | BaseException

#: How long leaving a run waits for its coordinator thread to end.
JOIN_TIMEOUT_S = 5.0
#: How long an interrupted wait (Ctrl-C) waits for the cancelled run's coordinator before the
#: KeyboardInterrupt goes on: enough for it to tell its tasks to stop (measured: under 50 ms on Ray and
#: inline, which stops at its next tile), short enough that Ctrl-C acts at once (issue 37: it took 5 s).
INTERRUPT_JOIN_S = 0.5


class UDFRun:
    """A run in progress. Both a sync and an async iterator of :class:`UDFResults`."""

    def __init__(self, source: RunSource, cancel_on_leave: bool = True, sync: bool = True,
                 frames_dropped: Callable[[], int] | None = None):
        """``source``: the run's coordinator (or a viewer's end of it, see runtime/host.py), started;
        ``cancel_on_leave``: leaving the loop before the end cancels the run; ``sync=False``: an async
        iterator only (``run_udf_iter(..., sync=False)``, as LiberTEM's): a plain ``for`` raises;
        ``frames_dropped``: the data set's count of lost frames, put on each result taken."""
        self.sync = sync
        self._frames_dropped = frames_dropped
        self._coordinator = source
        self._cancel_on_leave = cancel_on_leave
        self._exhausted = False
        self._cancel_requested = False
        self.last: UDFResults | None = None
        #: Results this viewer took so far (``last`` is the newest of them).
        self.taken = 0

    @property
    def run_id(self) -> str:
        return self._coordinator.run_id

    @property
    def coalesced(self) -> int:
        """Partial results folded into a later one because the consumer was busy (latest wins)."""
        return self._coordinator.coalesced

    @property
    def stats(self) -> dict | None:
        """What the run's coordinator received (``bytes``, ``results``) and its CPU seconds
        (``cpu_s``), complete once the run ended."""
        return self._coordinator.stats

    @property
    def done(self) -> bool:
        """True once the run is over and its coordinator has released its state."""
        return self._coordinator.finished

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the run's coordinator to end; whether it released its state."""
        self._coordinator.join(timeout)
        return self.done

    # -- control -------------------------------------------------------------
    def update_parameters(self, patch: Sequence[dict[str, object]], recompute: bool = False) -> None:
        """Patch parameters: one dict per UDF (``{}`` leaves a UDF as it is).

        Tasks dispatched from now on use the new parameters; tasks already
        running finish with the old ones, and each ``UDFResults.param_versions``
        tells which partition used which version. With ``recompute=True``
        partitions done with old parameters are computed again, so the final
        result equals a fresh run with the new parameters.

        A patch with a wrong number of dicts or an unknown parameter raises UDFException here (a
        recompute of a stream ConfigValidationError), and the run goes on as it was.

        A recompute patch that comes after the last partition merged, but before this loop read the
        run's end, still takes effect: the run computes again and the loop goes on to the new final
        result. Once the loop read the end (or the run was cancelled or failed) a patch raises
        RunEnded.

        >>> run.update_parameters([{"radius": 5.0}])
        """
        if self._exhausted:
            raise RunEnded(f"run {self.run_id[:8]} has ended (its end was read): a patch cannot take effect "
                           "any more; start a new run with the new parameters")
        self._coordinator.patch(list(patch), recompute)  # checked there (ParamVersions); a bad patch raises

    def update_parameters_experimental(self, parameters: Sequence[dict[str, object]]) -> Awaitable[None] | None:
        """LiberTEM's name for :meth:`update_parameters` (no recompute): the patch takes effect at once.

        On a run started with ``sync=False`` it returns an awaitable, as LiberTEM's async result
        generator's coroutine does, so ported ``await run.update_parameters_experimental(...)`` works.

        >>> run.update_parameters_experimental([{"radius": 5.0}])
        """
        self.update_parameters(parameters)
        return None if self.sync else _completed()

    def cancel(self) -> None:
        """Stop dispatching, cancel tasks in flight; the consumer gets UDFRunCancelled.

        A partial result not yet taken is dropped: the next step of the
        iteration raises at once.
        """
        self._cancel_requested = True
        self._coordinator.cancel()

    # -- consuming -------------------------------------------------------------
    def _take(self, item: UDFResults | Terminal) -> UDFResults:
        """The next result from an outbox item; raises StopIteration at the end, and the run's
        exception (or UDFRunCancelled) once its coordinator should be left to end (see callers)."""
        if self._cancel_requested:
            self._exhausted = True
            raise UDFRunCancelled(f"run {self.run_id[:8]} was cancelled")
        if isinstance(item, BaseException):
            self._exhausted = True
            raise item
        if not isinstance(item, UDFResults):  # FINISHED
            self._exhausted = True
            raise StopIteration
        if self._frames_dropped is not None:
            item.frames_dropped = self._frames_dropped()
        self.last = item
        self.taken += 1
        return item

    def __iter__(self) -> Iterator[UDFResults]:
        try:
            if not self.sync:  # refused: the run is cancelled and ended before the caller hears why
                self.cancel()
                self._coordinator.join(JOIN_TIMEOUT_S)
                raise TypeError("this run was started with run_udf_iter(..., sync=False): iterate it with "
                                "`async for`, or start it with sync=True for a plain `for` loop")
            while not self._exhausted:
                try:
                    item = self._coordinator.outbox.take()
                except BaseException:  # interrupted while waiting (Ctrl-C): the run goes on unless told
                    self._leave_interrupted()
                    raise
                try:
                    part = self._take(item)
                except StopIteration:
                    return
                except BaseException:
                    self._coordinator.join(JOIN_TIMEOUT_S)  # its tasks are told to stop before we raise
                    raise
                # yielded outside the try: a consumer leaving the loop (GeneratorExit here) must not wait
                # for the run to end before it is cancelled (measured: 1.2 s for a break early in a run)
                yield part
        finally:
            if not self._exhausted and self._cancel_on_leave and not self._cancel_requested:
                self.cancel()

    def _leave_interrupted(self) -> None:
        """The consumer's wait was interrupted (KeyboardInterrupt, SystemExit from a signal handler):
        cancel the run (unless it is a viewer's or detached) and give its coordinator a moment to tell
        its tasks to stop, bounded so that the interrupt acts at once."""
        if self._cancel_on_leave:
            self.cancel()
            self._coordinator.join(INTERRUPT_JOIN_S)

    def __aiter__(self) -> AsyncIterator[UDFResults]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[UDFResults]:
        box = self._coordinator.outbox
        try:
            while not self._exhausted:
                item = box.take_nowait()
                if item is None:
                    try:
                        item = await anyio.to_thread.run_sync(box.take, abandon_on_cancel=True)
                    except BaseException:
                        if self._cancel_on_leave:
                            self.cancel()  # the consumer was cancelled; the run's end unblocks the thread
                        raise
                try:
                    part = self._take(item)
                except StopIteration:
                    return
                except BaseException:
                    # wait for the coordinator in a thread: joining here would block the event loop
                    await anyio.to_thread.run_sync(self._coordinator.join, JOIN_TIMEOUT_S)
                    raise
                yield part  # outside the try, as in __iter__
        finally:
            if not self._exhausted and self._cancel_on_leave and not self._cancel_requested:
                self.cancel()

    def result(self) -> UDFResults:
        """Block until the run is done; return the final results."""
        self._coordinator.only_final_result()
        for _ in self:
            pass
        return self._final()

    async def aresult(self) -> UDFResults:
        """Await the end of the run; return the final results."""
        self._coordinator.only_final_result()
        async for _ in self:
            pass
        return self._final()

    # -- generator protocol: LiberTEM's run_udf_iter returns a (async) generator -------------------
    def close(self) -> None:
        """End the run as ``generator.close()`` does: cancelled unless it is over; nothing is raised."""
        if not self._exhausted:
            self.cancel()
            self._exhausted = True
            self._coordinator.join(JOIN_TIMEOUT_S)

    def throw(self, typ: ThrownType, val: object = None, tb: TracebackType | None = None) -> NoReturn:
        """``generator.throw()``: the run is ended (:meth:`close`) and the exception raised to the caller."""
        self.close()
        raise _exception(typ, val, tb)

    async def aclose(self) -> None:
        """``async_generator.aclose()``: :meth:`close` without blocking the event loop."""
        await anyio.to_thread.run_sync(self.close)

    async def athrow(self, typ: ThrownType, val: object = None, tb: TracebackType | None = None) -> NoReturn:
        """``async_generator.athrow()``: the run is ended (:meth:`aclose`) and the exception raised."""
        await self.aclose()
        raise _exception(typ, val, tb)

    def _final(self) -> UDFResults:
        if self.last is None:
            raise UDFRunCancelled(f"run {self.run_id[:8]} produced no results")
        return self.last


def _exception(typ: ThrownType, val: object = None, tb: TracebackType | None = None) -> BaseException:
    """The exception ``generator.throw(typ, val, tb)`` raises: an instance, or the class called with ``val``."""
    if isinstance(typ, BaseException):
        exc = typ
    elif isinstance(val, BaseException):
        exc = val
    elif val is None:
        exc = typ()
    else:
        exc = typ(*val) if isinstance(val, tuple) else typ(val)
    return exc.with_traceback(tb) if tb is not None else exc


async def _completed() -> None:
    """An awaitable with nothing left to do (a patch already applied)."""
