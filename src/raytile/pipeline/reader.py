"""`StreamReader`: ``for`` / ``async for`` over the values a running pipeline writes to one stream.

Values are copies, latest wins: a consumer slower than the loop skips
values (``skipped`` counts them) instead of making them pile up; the
iteration ends when the run ends and raises the run's error if it failed.
The async form waits in a worker thread through anyio, like UDF runs do.

>>> for frame in pipeline.values("commands", steps=100):
...     plot(frame)
>>> async for frame in pipeline.values("commands", steps=100):
...     await send(frame)
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Iterator

import anyio
import anyio.to_thread

from raytile.runtime.channel import FINISHED, SnapshotChannel

__all__ = ["StreamReader"]


class StreamReader:
    """One consumer of one stream. Made by :meth:`Pipeline.values`."""

    def __init__(self, stream: str, on_start: Callable[[], None], on_close: Callable[["StreamReader"], None]):
        self.stream = stream
        self._channel: SnapshotChannel[Any] = SnapshotChannel()  # the stream's values, as published
        self.box = self._channel.reader()
        self.last_generation = -1
        self._on_start = on_start
        self._on_close = on_close
        self._closed = False

    @property
    def skipped(self) -> int:
        """Values replaced by a newer one before the consumer took them."""
        return self._channel.replaced

    def publish(self, value: Any, generation_time: int) -> None:
        """Offer a copy of the stream's value (called by the runner after each step)."""
        if generation_time > self.last_generation:
            self.last_generation = generation_time
            self._channel.publish(value.copy())

    def finish(self, error: BaseException | None = None) -> None:
        self._channel.end(FINISHED if error is None else error)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)

    def _take(self, item: Any) -> Any:
        if item is FINISHED:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def __iter__(self) -> Iterator[Any]:
        self._on_start()
        try:
            while True:
                try:
                    yield self._take(self.box.take())
                except StopIteration:
                    return
        finally:
            self.close()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Any]:
        self._on_start()
        try:
            while True:
                item = self.box.take_nowait()
                if item is None:
                    item = await anyio.to_thread.run_sync(self.box.take, abandon_on_cancel=True)
                try:
                    value = self._take(item)
                except StopIteration:
                    return
                yield value
        finally:
            self.close()
