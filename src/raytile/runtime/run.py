"""`UDFRun`: the handle ``Context.run_udf_iter`` returns.

Iterate it (``for`` or ``async for``) for partial :class:`UDFResults`;
``update_parameters`` patches UDF parameters while it runs; ``cancel``
stops it. Leaving the loop early cancels the run.
"""

from __future__ import annotations

import queue
from typing import Any, AsyncIterator, Iterator, Sequence

import anyio
import anyio.to_thread

from raytile.common.errors import UDFException, UDFRunCancelled
from raytile.runtime.coordinator import FINISHED, Coordinator
from raytile.runtime.results import UDFResults


class UDFRun:
    """A run in progress. Both a sync and an async iterator of :class:`UDFResults`."""

    def __init__(self, coordinator: Coordinator, udf_names: Sequence[str]):
        self._coordinator = coordinator
        self._udf_names = list(udf_names)
        self._udfs = [u.copy() for u in coordinator._plan.udfs]
        self._exhausted = False
        self._cancel_requested = False
        self.last: UDFResults | None = None
        coordinator.start()

    @property
    def run_id(self) -> str:
        return self._coordinator.run_id

    # -- control -------------------------------------------------------------
    def update_parameters(self, patch: Sequence[dict[str, Any]], recompute: bool = False) -> None:
        """Patch parameters: one dict per UDF (``{}`` leaves a UDF as it is).

        Tasks dispatched from now on use the new parameters; tasks already
        running finish with the old ones, and each ``UDFResults.param_versions``
        tells which partition used which version. With ``recompute=True``
        partitions done with old parameters are computed again, so the final
        result equals a fresh run with the new parameters.
        """
        patch = list(patch)
        if len(patch) != len(self._udfs):
            raise UDFException(f"update_parameters needs {len(self._udfs)} dicts (one per UDF), got {len(patch)}")
        for udf, p in zip(self._udfs, patch):
            udf.update_parameters(p)  # validates names now, in the caller
        self._coordinator.patch(patch, recompute)

    def cancel(self) -> None:
        """Stop dispatching, cancel tasks in flight; the consumer gets UDFRunCancelled.

        Partial results still queued are dropped: the next step of the
        iteration raises at once.
        """
        self._cancel_requested = True
        self._coordinator.cancel()

    # -- consuming -------------------------------------------------------------
    def _take(self, item: Any) -> UDFResults:
        if self._cancel_requested:
            self._exhausted = True
            self._drain()
            raise UDFRunCancelled(f"run {self.run_id[:8]} was cancelled")
        if item is FINISHED:
            self._exhausted = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._exhausted = True
            self._drain()
            raise item
        self.last = item
        return item

    def _drain(self) -> None:
        self._coordinator.join(timeout=5)

    def __iter__(self) -> Iterator[UDFResults]:
        try:
            while not self._exhausted:
                try:
                    yield self._take(self._coordinator.outbox.get())
                except StopIteration:
                    return
        finally:
            if not self._exhausted:
                self.cancel()

    def __aiter__(self) -> AsyncIterator[UDFResults]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[UDFResults]:
        box = self._coordinator.outbox
        try:
            while not self._exhausted:
                try:
                    item = box.get_nowait()
                except queue.Empty:
                    try:
                        item = await anyio.to_thread.run_sync(box.get, abandon_on_cancel=True)
                    except BaseException:
                        # the consumer was cancelled: stop the run, unblock the waiting thread
                        self.cancel()
                        box.put(FINISHED)
                        raise
                try:
                    yield self._take(item)
                except StopIteration:
                    return
        finally:
            if not self._exhausted:
                self.cancel()

    def result(self) -> UDFResults:
        """Block until the run is done; return the final results."""
        self._coordinator.only_final_result()
        last = None
        for last in self:
            pass
        if last is None:
            last = self.last
        if last is None:
            raise UDFRunCancelled(f"run {self.run_id[:8]} produced no results")
        return last

    async def aresult(self) -> UDFResults:
        """Await the end of the run; return the final results."""
        self._coordinator.only_final_result()
        last = None
        async for last in self:
            pass
        if last is None:
            last = self.last
        if last is None:
            raise UDFRunCancelled(f"run {self.run_id[:8]} produced no results")
        return last
