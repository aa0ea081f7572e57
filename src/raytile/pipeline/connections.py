"""Stream values and the inputs that read them (SPECULA's outputs, InputValue and InputList).

A :class:`StreamValue` is allocated once and refilled in place; its
``generation_time`` is the step that last refreshed it (``-1``: never). An
input remembers the generation it last consumed, so a stage can tell
whether anything new arrived.

>>> v = StreamValue("frame", np.zeros(4, np.float32))
>>> inp = InputValue(); inp.connect(v)
>>> inp.refreshed()
False
>>> v.value[:] = 1; v.generation_time = 0
>>> inp.refreshed(), inp.get()[0]
(True, 1.0)
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamValue", "InputValue", "InputList"]


class StreamValue:
    """A named array refilled in place each time its writer runs; ``value`` is never rebound."""

    __slots__ = ("name", "_value", "generation_time")

    def __init__(self, name: str, value: Any):
        self.name = name
        self._value = value
        self.generation_time = -1

    @property
    def value(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return f"StreamValue({self.name!r}, shape={tuple(self._value.shape)}, generation_time={self.generation_time})"


class InputValue:
    """One input of a stage. ``optional=True`` inputs may stay unconnected (``get()`` is then None)."""

    __slots__ = ("optional", "source", "last_seen")

    def __init__(self, optional: bool = False):
        self.optional = optional
        self.source: StreamValue | None = None
        self.last_seen = -1

    def connect(self, source: StreamValue) -> None:
        self.source = source

    @property
    def connected(self) -> bool:
        return self.source is not None

    def get(self) -> Any:
        return None if self.source is None else self.source.value

    def refreshed(self) -> bool:
        """True if the source was refreshed after the last :meth:`consume`."""
        s = self.source
        return s is not None and s.generation_time > self.last_seen

    def consume(self) -> None:
        if self.source is not None:
            self.last_seen = self.source.generation_time


class InputList:
    """An input taking a list of streams of one kind; ``get()`` returns their values in order."""

    __slots__ = ("optional", "sources", "last_seen")

    def __init__(self, optional: bool = False):
        self.optional = optional
        self.sources: list[StreamValue] = []
        self.last_seen: list[int] = []

    def connect(self, source: StreamValue) -> None:
        self.sources.append(source)
        self.last_seen.append(-1)

    @property
    def connected(self) -> bool:
        return bool(self.sources)

    def get(self) -> list[Any]:
        return [s.value for s in self.sources]

    def refreshed(self) -> bool:
        return any(s.generation_time > seen for s, seen in zip(self.sources, self.last_seen))

    def consume(self) -> None:
        self.last_seen = [s.generation_time for s in self.sources]
